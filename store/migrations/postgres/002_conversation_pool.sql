-- kind: expand
-- The model pool a conversation is routed to (small, large): it stays there, so its prefix
-- cache keeps being reused; the router escalates it at most once.
ALTER TABLE conversations ADD COLUMN pool TEXT NOT NULL DEFAULT '';

-- Compaction (gateway/compactor.py): the summary turn's token count, and the user's durable
-- constraints (re-anchored near the end of every prompt) with theirs. Both are counted once,
-- when the summary is written, like every stored turn.
ALTER TABLE conversations ADD COLUMN summary_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE conversations ADD COLUMN pinned TEXT NOT NULL DEFAULT '';
ALTER TABLE conversations ADD COLUMN pinned_tokens INTEGER NOT NULL DEFAULT 0;
