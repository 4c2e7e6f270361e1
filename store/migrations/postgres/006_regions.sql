-- kind: expand
-- Regions: the region a conversation runs in ('' while it runs at home), so its later turns
-- follow it there (its prefix cache is there); and the region that served each stored turn.
ALTER TABLE conversations ADD COLUMN region TEXT NOT NULL DEFAULT '';
ALTER TABLE messages ADD COLUMN region TEXT NOT NULL DEFAULT '';
