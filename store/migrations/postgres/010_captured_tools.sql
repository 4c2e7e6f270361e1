-- kind: expand
-- The tools a captured turn offered the model (a turn run by the tool loop), as a JSON array
-- of [name, description, parameters, strict]; '[]' for every other turn and those before.
ALTER TABLE captured_prompts ADD COLUMN tools TEXT NOT NULL DEFAULT '[]';
