-- kind: expand
-- The exact prompt of each answered turn (gateway/prompt_capture.py), kept for the
-- operator's retention period and read only through the admin API. Keyed by the user's
-- message, so deleting the conversation (its messages) deletes its captures too.
CREATE TABLE captured_prompts (
  user_id          TEXT NOT NULL,
  message_id       TEXT NOT NULL,
  conversation_id  TEXT NOT NULL,
  version          TEXT NOT NULL DEFAULT '',
  model            TEXT NOT NULL DEFAULT '',
  node_id          TEXT NOT NULL DEFAULT '',
  temperature      REAL NOT NULL,
  max_tokens       INTEGER NOT NULL,
  turns            TEXT NOT NULL,
  created_at       REAL NOT NULL,
  PRIMARY KEY (user_id, message_id),
  FOREIGN KEY (user_id, message_id)
    REFERENCES messages (user_id, message_id) ON DELETE CASCADE
);
CREATE INDEX captured_prompts_by_time ON captured_prompts (created_at);
