-- kind: expand
CREATE TABLE users (
  user_id     TEXT PRIMARY KEY,
  tier        TEXT NOT NULL,
  token_hash  TEXT UNIQUE,
  created_at  REAL NOT NULL
);

CREATE TABLE conversations (
  user_id           TEXT NOT NULL,
  conversation_id   TEXT NOT NULL,
  title             TEXT NOT NULL DEFAULT '',
  model             TEXT NOT NULL DEFAULT '',
  summary           TEXT NOT NULL DEFAULT '',
  summary_upto_seq  INTEGER NOT NULL DEFAULT 0,
  total_tokens      INTEGER NOT NULL DEFAULT 0,
  created_at        REAL NOT NULL,
  updated_at        REAL NOT NULL,
  PRIMARY KEY (user_id, conversation_id)
);
CREATE INDEX conversations_by_user_updated ON conversations (user_id, updated_at DESC);

CREATE TABLE messages (
  user_id          TEXT NOT NULL,
  conversation_id  TEXT NOT NULL,
  seq              INTEGER NOT NULL,
  message_id       TEXT NOT NULL,
  parent_seq       INTEGER,
  role             TEXT NOT NULL,
  content          TEXT NOT NULL,
  tokens           INTEGER NOT NULL,
  model            TEXT NOT NULL DEFAULT '',
  replica_id       TEXT NOT NULL DEFAULT '',
  finish           TEXT NOT NULL DEFAULT '',
  created_at       REAL NOT NULL,
  PRIMARY KEY (user_id, conversation_id, seq),
  UNIQUE (user_id, message_id),
  FOREIGN KEY (user_id, conversation_id)
    REFERENCES conversations (user_id, conversation_id) ON DELETE CASCADE
);
