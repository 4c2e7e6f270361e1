-- kind: expand
-- The files users upload for the file_search tool: each kept whole (a user reads it back as
-- they gave it), and cut into passages, the units a search finds and a citation names. A
-- file's passages go with it (the foreign key; the store turns SQLite's foreign keys on).
-- The passages' full-text index (FTS5, porter stemming) holds no copy of their text
-- (external content); triggers keep it in step with the table, and SQLite fires them for
-- the rows a cascade deletes too. Passages are never edited, only added and deleted.
CREATE TABLE files (
  user_id     TEXT NOT NULL,
  file_id     TEXT NOT NULL,
  filename    TEXT NOT NULL,
  purpose     TEXT NOT NULL,
  bytes       INTEGER NOT NULL,
  passages    INTEGER NOT NULL,
  created_at  REAL NOT NULL,
  content     TEXT NOT NULL,
  PRIMARY KEY (user_id, file_id)
);
CREATE TABLE file_passages (
  user_id  TEXT NOT NULL,
  file_id  TEXT NOT NULL,
  idx      INTEGER NOT NULL,
  text     TEXT NOT NULL,
  PRIMARY KEY (user_id, file_id, idx),
  FOREIGN KEY (user_id, file_id) REFERENCES files (user_id, file_id) ON DELETE CASCADE
);
CREATE VIRTUAL TABLE file_passages_index USING fts5(
  text, content = 'file_passages', content_rowid = 'rowid', tokenize = 'porter unicode61'
);
CREATE TRIGGER file_passages_indexed AFTER INSERT ON file_passages BEGIN
  INSERT INTO file_passages_index (rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER file_passages_unindexed AFTER DELETE ON file_passages BEGIN
  INSERT INTO file_passages_index (file_passages_index, rowid, text)
    VALUES ('delete', old.rowid, old.text);
END;
