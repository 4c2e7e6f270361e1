-- kind: expand
-- Personal memory (gateway/memories.py): the entries a user keeps, with their text's
-- lexemes (English stemming) in a GIN index that a turn's lexical search reads.
CREATE TABLE memories (
  user_id     TEXT NOT NULL,
  memory_id   TEXT NOT NULL,
  text        TEXT NOT NULL,
  pinned      BOOLEAN NOT NULL DEFAULT FALSE,
  source      TEXT NOT NULL DEFAULT 'user',
  created_at  DOUBLE PRECISION NOT NULL,
  updated_at  DOUBLE PRECISION NOT NULL,
  lexemes     TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
  PRIMARY KEY (user_id, memory_id)
);
CREATE INDEX memories_by_lexeme ON memories USING GIN (lexemes);
