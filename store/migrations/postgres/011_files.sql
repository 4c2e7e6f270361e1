-- kind: expand
-- The files users upload for the file_search tool: each kept whole (a user reads it back as
-- they gave it), and cut into passages, the units a search finds and a citation names, with
-- their text's lexemes (English stemming) in a GIN index that the search reads. A file's
-- passages go with it (the foreign key).
CREATE TABLE files (
  user_id     TEXT NOT NULL,
  file_id     TEXT NOT NULL,
  filename    TEXT NOT NULL,
  purpose     TEXT NOT NULL,
  bytes       BIGINT NOT NULL,
  passages    INTEGER NOT NULL,
  created_at  DOUBLE PRECISION NOT NULL,
  content     TEXT NOT NULL,
  PRIMARY KEY (user_id, file_id)
);
CREATE TABLE file_passages (
  user_id  TEXT NOT NULL,
  file_id  TEXT NOT NULL,
  idx      INTEGER NOT NULL,
  text     TEXT NOT NULL,
  lexemes  TSVECTOR GENERATED ALWAYS AS (to_tsvector('english', text)) STORED,
  PRIMARY KEY (user_id, file_id, idx),
  FOREIGN KEY (user_id, file_id) REFERENCES files (user_id, file_id) ON DELETE CASCADE
);
CREATE INDEX file_passages_by_lexeme ON file_passages USING GIN (lexemes);
