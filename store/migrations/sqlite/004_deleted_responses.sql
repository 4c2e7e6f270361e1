-- kind: expand
-- Responses (the OpenAI Responses API) deleted by their user. A response is a stored message
-- and its answer; deleting it hides it from that API while its conversation keeps both turns,
-- the history of the responses that continued from it. Gone with its conversation.
CREATE TABLE deleted_responses (
  user_id          TEXT NOT NULL,
  conversation_id  TEXT NOT NULL,
  response_id      TEXT NOT NULL,
  deleted_at       REAL NOT NULL,
  PRIMARY KEY (user_id, response_id),
  FOREIGN KEY (user_id, conversation_id)
    REFERENCES conversations (user_id, conversation_id) ON DELETE CASCADE
);
