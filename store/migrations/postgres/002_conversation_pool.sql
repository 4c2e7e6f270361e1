-- The model pool a conversation is routed to (small, large): it stays there, so its prefix
-- cache keeps being reused; the router escalates it at most once.
ALTER TABLE conversations ADD COLUMN pool TEXT NOT NULL DEFAULT '';
