-- kind: expand
-- The same tables as the SQLite schema. Integers are BIGINT, as wide as SQLite's INTEGER.
-- Timestamps are epoch seconds in DOUBLE PRECISION, not timestamptz, so a record's float
-- round-trips exactly (list cursors compare updated_at with the value a client was given).
CREATE TABLE users (
  user_id     TEXT PRIMARY KEY,
  tier        TEXT NOT NULL,
  token_hash  TEXT UNIQUE,
  created_at  DOUBLE PRECISION NOT NULL
);

CREATE TABLE conversations (
  user_id           TEXT NOT NULL,
  conversation_id   TEXT NOT NULL,
  title             TEXT NOT NULL DEFAULT '',
  model             TEXT NOT NULL DEFAULT '',
  summary           TEXT NOT NULL DEFAULT '',
  summary_upto_seq  BIGINT NOT NULL DEFAULT 0,
  total_tokens      BIGINT NOT NULL DEFAULT 0,
  created_at        DOUBLE PRECISION NOT NULL,
  updated_at        DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (user_id, conversation_id)
);
CREATE INDEX conversations_by_user_updated ON conversations (user_id, updated_at DESC);

CREATE TABLE messages (
  user_id          TEXT NOT NULL,
  conversation_id  TEXT NOT NULL,
  seq              BIGINT NOT NULL,
  message_id       TEXT NOT NULL,
  parent_seq       BIGINT,
  role             TEXT NOT NULL,
  content          TEXT NOT NULL,
  tokens           BIGINT NOT NULL,
  model            TEXT NOT NULL DEFAULT '',
  replica_id       TEXT NOT NULL DEFAULT '',
  finish           TEXT NOT NULL DEFAULT '',
  created_at       DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (user_id, conversation_id, seq),
  CONSTRAINT messages_message_id_unique UNIQUE (user_id, message_id),
  FOREIGN KEY (user_id, conversation_id)
    REFERENCES conversations (user_id, conversation_id) ON DELETE CASCADE
);
