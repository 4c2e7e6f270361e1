// The web chat page: plain JS, no build step, served by the edge next to its HTTP API.
// Model text is only ever written with textContent, never parsed as HTML.
"use strict";

const TOKEN_KEY = "chat.token"; // localStorage: entered once, sent as a header, never in a URL
// sessionStorage: the answer this tab is streaming, so a reload resumes it where it was.
const PENDING_KEY = "chat.pending";
const ID = /^[A-Za-z0-9_-]{1,64}$/;
const FINISH_LABELS = {
  stop: "",
  length: "cut at the length limit",
  cancelled: "stopped",
  refused: "refused",
  error: "failed",
};

// A finished answer's thumbs: the rating each sends, and its label.
const RATINGS = [
  ["up", "👍", "Good answer"],
  ["down", "👎", "Bad answer"],
];

const $ = (id) => document.getElementById(id);
let conversationId = null; // the conversation on screen; null for a new one not yet sent
let streaming = null; // {messageId, controller} while an answer streams in

function newId(prefix) {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `${prefix}_${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function api(path, options = {}) {
  const token = localStorage.getItem(TOKEN_KEY) || "";
  const headers = { Authorization: `Bearer ${token}`, ...options.headers };
  return fetch(path, { ...options, headers });
}

function notice(text) {
  $("notice").textContent = text || "";
  $("notice").hidden = !text;
}

// What a refused request means, in words for the notice.
async function refusal(response) {
  if (response.status === 429) {
    const wait = response.headers.get("Retry-After");
    return wait
      ? `You've reached your limit — try again in ${wait} s.`
      : "You've reached your limit — try again later.";
  }
  try {
    return (await response.json()).error.message;
  } catch {
    return `The request failed (HTTP ${response.status}).`;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const savePending = (pending) => sessionStorage.setItem(PENDING_KEY, JSON.stringify(pending));
const forgetPending = () => sessionStorage.removeItem(PENDING_KEY);

// Server-sent events over fetch(): EventSource can neither POST nor send the Authorization
// header, so the body is read as a stream and split into events here. The edge writes "\n"
// line ends only; lines starting with ":" are keep-alives.
async function readEvents(response, onEvent) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const event = { name: "message", id: 0, data: [] };
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event.name = text;
        else if (field === "id") event.id = Number(text);
        else if (field === "data") event.data.push(text);
      }
      if (event.data.length) onEvent(event.name, event.id, JSON.parse(event.data.join("\n")));
    }
  }
}

// Rendering ------------------------------------------------------------------------------------

// One question and its answers (a regenerated answer joins the answers of its question).
function addTurn(content, questionId) {
  const turn = document.createElement("section");
  turn.className = "turn";
  turn.dataset.qid = questionId;
  const question = document.createElement("div");
  question.className = "msg user";
  question.textContent = content;
  turn.append(question);
  $("log").append(turn);
  return turn;
}

function addAnswer(turn) {
  const el = document.createElement("div");
  el.className = "msg assistant";
  el.dataset.state = "streaming";
  const text = document.createElement("div");
  text.className = "text";
  const info = document.createElement("div");
  info.className = "info";
  const model = document.createElement("span");
  model.className = "model";
  const finish = document.createElement("span");
  finish.className = "finish";
  const again = document.createElement("button");
  again.type = "button";
  again.className = "regen";
  again.textContent = "Regenerate";
  again.disabled = streaming !== null;
  again.addEventListener("click", () => regenerate(turn));
  info.append(model, finish, again);
  el.append(text, info);
  turn.append(el);
  return {
    el,
    setText(value) {
      text.textContent = value;
      el.scrollIntoView({ block: "end" });
    },
    setModel(name, replica) {
      model.textContent = name && replica ? `${name} · ${replica}` : name || "";
    },
    // answerId: the stored answer's id, which its thumbs rate (none for a failed answer,
    // which is not stored).
    end(state, answerId) {
      el.dataset.state = state;
      finish.textContent = FINISH_LABELS[state] ?? state;
      if (answerId && state !== "error" && !info.querySelector(".rating")) {
        info.insertBefore(thumbs(answerId), again);
      }
    },
  };
}

// Thumbs up and down under an answer; the one pressed last shows as pressed (rating again
// replaces the rating).
function thumbs(answerId) {
  const box = document.createElement("span");
  box.className = "rating";
  for (const [rating, label, title] of RATINGS) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = `rate rate-${rating}`;
    button.textContent = label;
    button.title = title;
    button.setAttribute("aria-label", title);
    button.setAttribute("aria-pressed", "false");
    button.addEventListener("click", () => rate(box, answerId, rating));
    box.append(button);
  }
  return box;
}

async function rate(box, answerId, rating) {
  const response = await api(`/v1/messages/${answerId}/feedback`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ rating }),
  });
  if (!response.ok) return notice(await refusal(response));
  for (const button of box.querySelectorAll(".rate")) {
    button.setAttribute("aria-pressed", String(button.classList.contains(`rate-${rating}`)));
  }
}

// Stored turns, oldest first. A regeneration is stored as a new question with the same text and
// parent as the first, so those share one turn on screen.
function render(messages, skipAnswerTo) {
  const turns = new Map(); // question id -> its turn
  const byAsked = new Map(); // parent + text -> turn
  for (const m of messages) {
    if (m.role === "user") {
      const asked = `${m.parentId || ""}\n${m.content || ""}`;
      if (!byAsked.has(asked)) byAsked.set(asked, addTurn(m.content || "", m.messageId));
      turns.set(m.messageId, byAsked.get(asked));
    } else if (m.role === "assistant" && turns.has(m.parentId) && m.parentId !== skipAnswerTo) {
      const view = addAnswer(turns.get(m.parentId));
      view.setText(m.content || "");
      view.setModel(m.model, m.replica);
      view.end(m.finish || "stop", m.messageId);
    }
  }
  return turns;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
  for (const button of document.querySelectorAll(".regen")) button.disabled = busy;
}

// Streaming --------------------------------------------------------------------------------------

// Reads one answer's events into view; true once it has ended (done or error).
async function readAnswer(response, view, pending) {
  let ended = false;
  await readEvents(response, (name, id, data) => {
    if (id) pending.lastEventId = id;
    if (name === "meta") {
      pending.model = data.model;
      pending.replica = data.replica;
      view.setModel(data.model, data.replica);
    } else if (name === "delta") {
      pending.text += data.text;
      view.setText(pending.text);
    } else if (name === "retract") {
      // The output check flagged text already shown: all of it goes; the refusal follows.
      pending.text = "";
      view.setText("");
    } else if (name === "done") {
      view.end(data.finish, `${pending.messageId}.answer`);
      ended = true;
    } else if (name === "error") {
      view.end("error");
      notice(data.message);
      ended = true;
    }
    if (!ended) savePending(pending);
  });
  return ended;
}

function resumeRequest(pending, signal) {
  // fetch() can send Last-Event-ID itself, so the position never goes into the URL either.
  const headers = { "Last-Event-ID": String(pending.lastEventId) };
  return api(`/v1/messages/${pending.messageId}/stream`, { headers, signal });
}

// Streams one answer: `request` makes the first call (the POST, or a resume after a reload).
// If the connection drops before the answer ends, it resumes from the last event seen: the
// gateway keeps running the answer while no one listens. False when the first call is refused.
async function streamAnswer(pending, view, request) {
  const controller = new AbortController();
  streaming = { messageId: pending.messageId, controller };
  setBusy(true);
  try {
    for (let attempt = 0; attempt < 4; attempt++) {
      try {
        const response = await request(controller.signal);
        if (!response.ok && attempt === 0) {
          forgetPending();
          notice(await refusal(response));
          return false;
        }
        if (!response.ok) break; // the gateway no longer has it
        if (attempt === 0) notice("");
        if (await readAnswer(response, view, pending)) {
          forgetPending();
          return true;
        }
      } catch {
        if (controller.signal.aborted) return true; // the page moved on; the answer goes on
      }
      await sleep(1000);
      request = (signal) => resumeRequest(pending, signal);
    }
    view.end("error");
    notice("The connection to the answer was lost; reload the page to try again.");
    return true;
  } finally {
    if (streaming?.controller === controller) {
      streaming = null;
      setBusy(false);
    }
  }
}

// Stops following the answer on screen (it goes on, and is stored, at the gateway).
function abandon() {
  if (streaming) {
    streaming.controller.abort();
    streaming = null;
    forgetPending();
    setBusy(false);
  }
}

// Asks `content` as a new turn, or again in `turn`. parentId "" lets the gateway go on from the
// conversation's newest message. True when the gateway took it (it is then streamed).
async function ask(turn, content, parentId) {
  if (!conversationId) {
    conversationId = newId("c");
    history.replaceState(null, "", `#${conversationId}`);
  }
  const pending = {
    conversationId,
    messageId: newId("m"),
    content,
    lastEventId: 0,
    text: "",
    model: "",
    replica: "",
  };
  const asked = turn || addTurn(content, pending.messageId);
  const view = addAnswer(asked);
  const asking = parentId ? { content, parentId } : { content };
  // The remember tool, named only when the user allows it: nothing is saved from plain text.
  if ($("remember").checked) asking.tools = [{ type: "remember" }];
  const body = JSON.stringify(asking);
  const headers = { "Content-Type": "application/json", "Idempotency-Key": pending.messageId };
  notice("");
  // Saved before the POST: a reload from here on finds the answer by its id and resumes it.
  savePending(pending);
  const path = `/v1/conversations/${conversationId}/messages`;
  const accepted = await streamAnswer(pending, view, (signal) =>
    api(path, { method: "POST", headers, body, signal }),
  );
  if (accepted) {
    loadConversations();
    if ($("memory").open) loadMemories(); // the answer may have saved something
  } else {
    (turn ? view.el : asked).remove(); // refused: nothing was asked, nothing stored
    if (!$("log").childElementCount) {
      conversationId = null; // it was never created
      history.replaceState(null, "", location.pathname);
    }
  }
  return accepted;
}

async function send(event) {
  event.preventDefault();
  const content = $("input").value.trim();
  if (!content || streaming) return;
  $("input").value = "";
  // Refused (a 429, say): the question goes back into the box, to send again later.
  if (!(await ask(null, content, ""))) $("input").value = content;
}

// Asks the turn's question again from the same place: the parent of the question.
async function regenerate(turn) {
  if (streaming) return;
  const response = await api(`/v1/messages/${turn.dataset.qid}`);
  if (!response.ok) return notice(await refusal(response));
  const { message } = await response.json();
  await ask(turn, message.content, message.parentId || "");
}

async function stop() {
  if (!streaming) return;
  const response = await api(`/v1/messages/${streaming.messageId}/stop`, { method: "POST" });
  if (!response.ok) notice(await refusal(response));
  // The stream itself then ends with done {finish: "cancelled"}.
}

// Conversations ----------------------------------------------------------------------------------

async function loadConversations() {
  const response = await api("/v1/conversations?limit=50");
  if (!response.ok) return notice(await refusal(response));
  const { conversations = [] } = await response.json();
  $("conversations").replaceChildren(
    ...conversations.map((c) => {
      const item = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.dataset.cid = c.conversationId;
      button.textContent = c.title || c.conversationId;
      button.classList.toggle("current", c.conversationId === conversationId);
      button.addEventListener("click", () => openConversation(c.conversationId));
      item.append(button);
      return item;
    }),
  );
}

// Shows a stored conversation; returns its turns by question id.
async function openConversation(cid, skipAnswerTo = null) {
  abandon();
  conversationId = cid;
  history.replaceState(null, "", `#${cid}`);
  $("log").replaceChildren();
  notice("");
  for (const button of $("conversations").querySelectorAll("button")) {
    button.classList.toggle("current", button.dataset.cid === cid);
  }
  const response = await api(`/v1/conversations/${cid}/messages`);
  if (!response.ok) {
    notice(await refusal(response));
    return new Map();
  }
  const { messages = [] } = await response.json();
  return render(messages, skipAnswerTo);
}

function newChat() {
  abandon();
  conversationId = null;
  history.replaceState(null, "", location.pathname);
  $("log").replaceChildren();
  notice("");
  loadConversations();
  $("input").focus();
}

// After a reload mid-answer: show the conversation without that answer's stored copy (if it
// has ended meanwhile), put back the text seen so far, and follow on from the last event.
async function resumePending() {
  const pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) || "null");
  if (!pending) return false;
  const turns = await openConversation(pending.conversationId, pending.messageId);
  const turn = turns.get(pending.messageId) || addTurn(pending.content, pending.messageId);
  const view = addAnswer(turn);
  view.setText(pending.text);
  view.setModel(pending.model, pending.replica);
  const resumed = await streamAnswer(pending, view, (signal) => resumeRequest(pending, signal));
  // Too late to follow (or never started): show what was stored instead.
  if (!resumed) await openConversation(pending.conversationId);
  return true;
}

// Memory -----------------------------------------------------------------------------------------

async function loadMemories() {
  const response = await api("/v1/memories");
  if (!response.ok) return notice(await refusal(response));
  const { memories = [] } = await response.json();
  $("memories").replaceChildren(...memories.map(memoryItem));
}

function memoryItem(memory) {
  const item = document.createElement("li");
  item.dataset.id = memory.id;
  item.classList.toggle("aged", memory.aged);
  const text = document.createElement("span");
  text.className = "memory-text";
  text.textContent = memory.text;
  text.title = memory.aged
    ? "Aged: no conversation reads it unless it is pinned"
    : `Written ${new Date(memory.updatedAt).toLocaleString()}`;
  const pin = document.createElement("button");
  pin.type = "button";
  pin.className = "memory-pin";
  pin.textContent = "📌";
  pin.title = memory.pinned ? "Pinned: never ages" : "Pin it so it never ages";
  pin.setAttribute("aria-pressed", String(memory.pinned));
  pin.addEventListener("click", () => changeMemory(memory.id, "PATCH", { pinned: !memory.pinned }));
  const forget = document.createElement("button");
  forget.type = "button";
  forget.className = "memory-delete";
  forget.textContent = "✕";
  forget.title = "Forget it";
  forget.addEventListener("click", () => changeMemory(memory.id, "DELETE"));
  item.append(text, pin, forget);
  return item;
}

async function changeMemory(id, method, change) {
  const options = { method };
  if (change) {
    options.headers = { "Content-Type": "application/json" };
    options.body = JSON.stringify(change);
  }
  const response = await api(`/v1/memories/${encodeURIComponent(id)}`, options);
  if (!response.ok) return notice(await refusal(response));
  notice("");
  await loadMemories();
}

async function keepMemory(event) {
  event.preventDefault();
  const text = $("memory-text").value.trim();
  if (!text) return;
  const response = await api("/v1/memories", {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ text }),
  });
  if (!response.ok) return notice(await refusal(response));
  notice("");
  $("memory-text").value = "";
  await loadMemories();
}

async function start() {
  if (!localStorage.getItem(TOKEN_KEY)) return notice("Enter your bearer token to start.");
  notice("");
  await loadConversations();
  if ($("memory").open) await loadMemories();
  if (await resumePending()) return;
  const cid = location.hash.slice(1);
  if (ID.test(cid)) await openConversation(cid);
}

document.addEventListener("DOMContentLoaded", () => {
  $("token").value = localStorage.getItem(TOKEN_KEY) || "";
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    localStorage.setItem(TOKEN_KEY, $("token").value.trim());
    start();
  });
  $("composer").addEventListener("submit", send);
  $("input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", newChat);
  $("memory").addEventListener("toggle", () => $("memory").open && loadMemories());
  $("memory-form").addEventListener("submit", keepMemory);
  start();
});
