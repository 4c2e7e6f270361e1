-- kind: expand
-- What served each turn (gateway/pipeline.py writes it with the user's message): the model
-- version and the user's slice of the rollout, the pool the router chose, the daily budget's
-- outcome and the pool that actually served after the budget and the fallback chain. A
-- conversation keeps the version of its first turn (domain/rollout.py).
CREATE TABLE message_serving (
  user_id          TEXT NOT NULL,
  message_id       TEXT NOT NULL,
  conversation_id  TEXT NOT NULL,
  version          TEXT NOT NULL,
  slice            TEXT NOT NULL DEFAULT '',
  routed_pool      TEXT NOT NULL DEFAULT '',
  budget           TEXT NOT NULL DEFAULT '',
  served_pool      TEXT NOT NULL DEFAULT '',
  created_at       DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (user_id, message_id),
  FOREIGN KEY (user_id, message_id)
    REFERENCES messages (user_id, message_id) ON DELETE CASCADE
);
CREATE INDEX message_serving_by_conversation
  ON message_serving (user_id, conversation_id, created_at);
