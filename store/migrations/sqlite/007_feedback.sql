-- kind: expand
-- Users' ratings of their answers (ChatService.RateMessage): one per assistant message, a
-- new rating replacing the old, with the model version that served the answer (read from
-- message_serving when rated) so the ratings can be counted per version.
CREATE TABLE message_feedback (
  user_id          TEXT NOT NULL,
  message_id       TEXT NOT NULL,
  conversation_id  TEXT NOT NULL,
  rating           TEXT NOT NULL CHECK (rating IN ('up', 'down')),
  comment          TEXT NOT NULL DEFAULT '',
  version          TEXT NOT NULL DEFAULT '',
  created_at       REAL NOT NULL,
  updated_at       REAL NOT NULL,
  PRIMARY KEY (user_id, message_id),
  FOREIGN KEY (user_id, message_id)
    REFERENCES messages (user_id, message_id) ON DELETE CASCADE
);
