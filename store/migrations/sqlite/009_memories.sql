-- kind: expand
-- Personal memory (gateway/memories.py): the entries a user keeps, and a full-text index
-- over their text (FTS5, porter stemming) that a turn's lexical search reads. The index
-- holds no copy of the text (external content); triggers keep it in step with the table.
CREATE TABLE memories (
  user_id     TEXT NOT NULL,
  memory_id   TEXT NOT NULL,
  text        TEXT NOT NULL,
  pinned      INTEGER NOT NULL DEFAULT 0,
  source      TEXT NOT NULL DEFAULT 'user',
  created_at  REAL NOT NULL,
  updated_at  REAL NOT NULL,
  PRIMARY KEY (user_id, memory_id)
);
CREATE VIRTUAL TABLE memories_index USING fts5(
  text, content = 'memories', content_rowid = 'rowid', tokenize = 'porter unicode61'
);
CREATE TRIGGER memories_indexed AFTER INSERT ON memories BEGIN
  INSERT INTO memories_index (rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER memories_unindexed AFTER DELETE ON memories BEGIN
  INSERT INTO memories_index (memories_index, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
CREATE TRIGGER memories_reindexed AFTER UPDATE OF text ON memories BEGIN
  INSERT INTO memories_index (memories_index, rowid, text) VALUES ('delete', old.rowid, old.text);
  INSERT INTO memories_index (rowid, text) VALUES (new.rowid, new.text);
END;
