// Message rendering: user turns, assistant turns built from AG-UI events, stored transcripts.
//
// A live run and a reloaded thread use the same widgets: text bubbles, a collapsible reasoning
// block, one card per tool call. An answer that was stopped or failed carries a status badge
// ("stopped", "failed"), live or after a reload (from the stored message's status), and a tool
// call that failed (its result is an error, or the run failed while it ran) shows as failed.

import { copyText, MarkdownView, renderMarkdown } from "./markdown.js";
import { toolOutcome } from "./outcomes.js";
import { el, formatSize, newId, prettyJson, t, textOf } from "./util.js";

let log = null;
let empty = null;
let attachmentUrl = (id) => id;
let onActivity = () => {}; // setStatus of the page, for "Writing…" and friends
let onFilled = () => {}; // called once earlier turns of a long transcript were filled in

export function setupRendering(options) {
  ({ log, empty, attachmentUrl, onActivity } = options);
  if (options.onFilled) onFilled = options.onFilled;
}

// The AssistantTurn a `.turn.assistant` element shows (its messages, by id), or undefined.
const turnsByElement = new WeakMap();
export function assistantTurnOf(element) {
  return turnsByElement.get(element);
}

function nearBottom() {
  return log.scrollHeight - log.scrollTop - log.clientHeight < 80;
}

let batching = false; // renderTranscript scrolls once at the end, not once per message

export function scrollDown(force = false) {
  if (batching) return;
  if (force || nearBottom()) log.scrollTop = log.scrollHeight;
}

function hideEmpty() {
  if (empty) empty.hidden = true;
}

export function clearLog() {
  generation += 1; // a long transcript still filling in stops
  log.querySelectorAll(".turn").forEach((node) => node.remove());
  if (empty) empty.hidden = false;
}

// "stopped", "failed" or null, from a stored message's `status` (top level or in metadata).
export function messageStatus(message) {
  const status = message.status || (message.metadata && message.metadata.status);
  if (typeof status !== "string") return null;
  const value = status.toLowerCase();
  if (["interrupted", "cancelled", "canceled", "stopped"].includes(value)) return "stopped";
  if (["errored", "error", "failed"].includes(value)) return "failed";
  return null;
}

// How a tool result says the tool did not succeed: "failed" (an `error`, a status of errored),
// "refused" or "denied" (pydantic-ai's outcome, modules/outcomes.js); null when it succeeded.
function toolFailed(message) {
  if (message.error || messageStatus(message) === "failed") return "failed";
  return toolOutcome(message);
}

// A download link for each attachment ref a user message carries.
function fileLinks(refs) {
  const list = el("ul", "file-chips");
  list.setAttribute("aria-label", t("Attachments"));
  for (const ref of refs) {
    const item = el("li", "file-chip");
    const link = el("a", "file-name", ref.name || "attachment");
    link.href = attachmentUrl(ref.id);
    link.download = ref.name || "";
    link.title = `Download ${ref.name || "the attachment"}`;
    item.append(link);
    if (typeof ref.size === "number") item.append(el("span", "file-size", formatSize(ref.size)));
    list.append(item);
  }
  return list;
}

// "Thought for 3 s": the label of a reasoning block that took `ms` milliseconds.
function thoughtFor(ms) {
  return t("Thought for {seconds} s", { seconds: Math.max(1, Math.round(ms / 1000)) });
}

// How long each reasoning step of the transcript shown took (message id -> milliseconds): a
// run stores it with its outcome, on its last message (`chatHistory.runOutcome.reasoning_ms`).
let reasoningTimes = new Map();

function timesOf(messages) {
  const times = new Map();
  for (const message of messages) {
    const book = message && message.chatHistory;
    const took = book && book.runOutcome && book.runOutcome.reasoning_ms;
    if (!took || typeof took !== "object") continue;
    for (const [id, ms] of Object.entries(took)) {
      if (typeof ms === "number" && Number.isFinite(ms)) times.set(id, ms);
    }
  }
  return times;
}

// A "Copy" button for a message; `source()` gives its markdown when clicked.
function copyMessageButton(source) {
  const button = el("button", "button ghost small copy-message", t("Copy"));
  button.type = "button";
  button.setAttribute("aria-label", t("Copy message"));
  button.addEventListener("click", () => copyText(source(), button));
  const actions = el("div", "message-actions");
  actions.append(button);
  return actions;
}

export function renderUser(text, attachments = [], id = null) {
  hideEmpty();
  const turn = el("div", "turn user");
  if (id) turn.dataset.messageId = id;
  if (text) {
    const bubble = el("div", "bubble md");
    bubble.append(...renderMarkdown(text));
    turn.append(bubble, copyMessageButton(() => text));
  }
  if (attachments.length) turn.append(fileLinks(attachments));
  log.append(turn);
  scrollDown(true);
}

// The attachment refs of a stored message: its `attachments` list, or `metadata.attachments`.
export function messageAttachments(message) {
  const refs = Array.isArray(message.attachments)
    ? message.attachments
    : message.metadata && Array.isArray(message.metadata.attachments)
      ? message.metadata.attachments
      : [];
  return refs
    .map((ref) => (typeof ref === "string" ? { id: ref, name: "attachment" } : ref))
    .filter((ref) => ref && typeof ref.id === "string");
}

// Renders one assistant turn and keeps the AG-UI messages it produced.
export class AssistantTurn {
  constructor() {
    hideEmpty();
    this.el = el("div", "turn assistant");
    this.el.setAttribute("aria-label", t("Assistant"));
    log.append(this.el);
    turnsByElement.set(this.el, this);
    this.messages = new Map(); // messageId -> AG-UI message
    this.toolCalls = new Map(); // toolCallId -> {call, card, args, result, done}
    this.texts = new Map(); // messageId -> bubble element
    this.views = new Map(); // messageId -> its bubble's MarkdownView
    this.reasoning = new Map(); // messageId -> {details, summary, body, started}
    this.status = null; // "stopped" or "failed" once the badge is shown
    this.cut = new Set(); // text bubbles a cancel closed while they were still streaming
  }

  message(id, role) {
    let message = this.messages.get(id);
    if (!message) {
      message = role === "assistant" ? { id, role, content: "" } : { id, role };
      this.messages.set(id, message);
    }
    return message;
  }

  textBubble(id) {
    let bubble = this.texts.get(id);
    if (!bubble) {
      bubble = el("div", "bubble text md streaming");
      this.texts.set(id, bubble);
      this.views.set(id, new MarkdownView(bubble));
      this.el.append(bubble, copyMessageButton(() => this.messages.get(id)?.content || ""));
    }
    return bubble;
  }

  reasoningBlock(id) {
    let block = this.reasoning.get(id);
    if (!block) {
      const details = el("details", "reasoning");
      details.open = true;
      const summary = el("summary", "", t("Thinking…"));
      const body = el("div", "body");
      details.append(summary, body);
      this.el.append(details);
      block = { details, summary, body, started: performance.now() };
      this.reasoning.set(id, block);
    }
    return block;
  }

  toolCard(toolCallId, name) {
    const card = el("div", "tool");
    card.setAttribute("role", "group");
    card.setAttribute("aria-label", `Tool call ${name}`);
    const head = el("div", "tool-head");
    head.append(el("span", "badge", "tool"), el("span", "tool-name", name));
    const list = el("dl");
    // JSON keeps its lines: a long one scrolls sideways instead of wrapping mid-token.
    const argsValue = el("dd", "args");
    const args = el("code", "", "");
    const pre = el("pre");
    pre.tabIndex = 0; // a scrolling region must be reachable by keyboard
    pre.setAttribute("aria-label", `Arguments of ${name}`);
    pre.append(args);
    argsValue.append(pre);
    const result = el("dd", "pending", "running…");
    list.append(el("dt", "", "arguments"), argsValue, el("dt", "", "result"), result);
    card.append(head, list);
    card.dataset.toolCallId = toolCallId;
    this.el.append(card);
    return { card, args, result, head };
  }

  // The card of a tool call, created on first sight (a stored or replayed call).
  toolEntry(call) {
    let entry = this.toolCalls.get(call.id);
    if (!entry) {
      entry = { call, ...this.toolCard(call.id, call.function.name) };
      this.toolCalls.set(call.id, entry);
    }
    return entry;
  }

  toolResult(entry, content, failed) {
    entry.result.classList.remove("pending");
    entry.result.textContent = textOf(content);
    entry.done = true;
    if (failed) this.toolFailed(entry, null, failed);
  }

  // Mark a tool call failed: a red card with a badge, "failed" or `label` ("refused",
  // "denied"), and `text` as its result.
  toolFailed(entry, text, label = "failed") {
    entry.card.classList.add("failed");
    entry.card.dataset.status = "failed";
    let badge = entry.head.querySelector(".tool-status");
    if (!badge) {
      badge = el("span", "tool-status");
      entry.head.append(badge);
    }
    badge.textContent = label === "failed" ? "failed" : t(label);
    badge.title =
      label === "refused"
        ? t("The tool refused this call; the model was told why.")
        : label === "denied"
          ? t("This tool call was not allowed to run.")
          : t("This tool call failed.");
    if (text !== null) {
      entry.result.classList.remove("pending");
      entry.result.textContent = text;
    }
    entry.done = true;
  }

  // The answer's status badge: "stopped" or "failed" ("failed" wins over "stopped").
  markStatus(status) {
    if (!status || this.status === "failed" || this.status === status) return;
    this.status = status;
    this.el.dataset.status = status;
    let badge = this.el.querySelector(".turn-status");
    if (!badge) {
      badge = el("span", "turn-status");
      this.el.prepend(badge);
    }
    badge.textContent = status;
    badge.className = `turn-status ${status}`;
    badge.title = status === "stopped" ? t("This answer was stopped before it finished.") : t("This answer failed.");
  }

  handle(event) {
    switch (event.type) {
      case "TEXT_MESSAGE_START": {
        // A replayed (or re-opened) message starts over: its content comes again.
        const message = this.message(event.messageId, "assistant");
        if (event.replay) message.content = "";
        const bubble = this.texts.get(event.messageId);
        if (bubble) bubble.classList.add("streaming");
        break;
      }
      case "TEXT_MESSAGE_CONTENT": {
        const message = this.message(event.messageId, "assistant");
        message.content = (message.content || "") + event.delta;
        this.textBubble(event.messageId);
        this.views.get(event.messageId).update(message.content);
        onActivity(t("Writing…"), true);
        break;
      }
      case "TEXT_MESSAGE_END": {
        const view = this.views.get(event.messageId);
        if (view) view.flush();
        const bubble = this.texts.get(event.messageId);
        if (bubble) bubble.classList.remove("streaming");
        break;
      }
      case "TOOL_CALL_START": {
        const known = this.toolCalls.get(event.toolCallId);
        if (known) {
          if (event.replay) known.call.function.arguments = "";
          break;
        }
        const parentId = event.parentMessageId || event.toolCallId;
        const parent = this.message(parentId, "assistant");
        const call = {
          id: event.toolCallId,
          type: "function",
          function: { name: event.toolCallName, arguments: "" },
        };
        parent.toolCalls = [...(parent.toolCalls || []), call];
        this.toolEntry(call);
        onActivity(`Calling ${event.toolCallName}…`, true);
        break;
      }
      case "TOOL_CALL_ARGS": {
        const entry = this.toolCalls.get(event.toolCallId);
        if (!entry) break;
        entry.call.function.arguments += event.delta;
        entry.args.textContent = entry.call.function.arguments;
        break;
      }
      case "TOOL_CALL_END": {
        const entry = this.toolCalls.get(event.toolCallId);
        if (entry) entry.args.textContent = prettyJson(entry.call.function.arguments);
        break;
      }
      case "TOOL_CALL_RESULT": {
        const message = this.message(event.messageId, "tool");
        message.toolCallId = event.toolCallId;
        message.content = event.content;
        if (event.error) message.error = event.error;
        const entry = this.toolCalls.get(event.toolCallId);
        if (entry) this.toolResult(entry, event.content, toolFailed(event));
        break;
      }
      case "REASONING_MESSAGE_START": {
        const message = this.message(event.messageId, "reasoning");
        if (event.replay || !message.content) message.content = "";
        this.reasoningBlock(event.messageId);
        onActivity(t("Thinking…"), true);
        break;
      }
      case "REASONING_MESSAGE_CONTENT": {
        const message = this.message(event.messageId, "reasoning");
        message.content = (message.content || "") + event.delta;
        this.reasoningBlock(event.messageId).body.textContent = message.content;
        break;
      }
      case "REASONING_MESSAGE_END": {
        const block = this.reasoning.get(event.messageId);
        if (block) {
          block.summary.textContent = thoughtFor(performance.now() - block.started);
          block.details.open = false;
        }
        break;
      }
      case "REASONING_ENCRYPTED_VALUE":
        if (event.subtype === "tool-call") {
          const entry = this.toolCalls.get(event.entityId);
          if (entry) entry.call.encryptedValue = event.encryptedValue;
        } else if (this.messages.has(event.entityId)) {
          const message = this.messages.get(event.entityId);
          message.encryptedValue = event.encryptedValue;
          // A tool result's outcome comes right after it: a refused call turns red now.
          const entry = message.role === "tool" && this.toolCalls.get(message.toolCallId);
          const label = entry && toolOutcome(message);
          if (label) this.toolFailed(entry, null, label);
        }
        break;
      case "RUN_ERROR":
        // A tool still running when the run failed failed with it.
        for (const entry of this.toolCalls.values()) {
          if (!entry.done) this.toolFailed(entry, "failed: the run ended with an error");
        }
        this.markStatus("failed");
        this.notice(event.message || t("The run failed."), true);
        break;
      default:
        break; // RUN_STARTED, RUN_FINISHED, REASONING_START/END, STEP_*, state events
    }
    scrollDown();
  }

  // Show a stored message (a reloaded thread, a MESSAGES_SNAPSHOT) in this turn.
  adopt(message) {
    if (message.role === "reasoning") {
      const block = this.reasoningBlock(message.id);
      this.messages.set(message.id, { ...message });
      block.body.textContent = message.content || "";
      // How long it took, as the run stored it; a step stored without it (an older run, or
      // one that ended mid-thought) still reads like the live label.
      const took = reasoningTimes.get(message.id);
      block.summary.textContent = took === undefined ? t("Thought process") : thoughtFor(took);
      block.details.open = false;
    } else if (message.role === "assistant") {
      const kept = { ...message, content: typeof message.content === "string" ? message.content : textOf(message.content) };
      if (message.toolCalls) kept.toolCalls = message.toolCalls.map((call) => ({ ...call, function: { ...call.function } }));
      this.messages.set(message.id, kept);
      if (kept.content) {
        const bubble = this.textBubble(message.id);
        const view = this.views.get(message.id);
        view.update(kept.content);
        view.flush();
        bubble.classList.remove("streaming");
      }
      for (const call of kept.toolCalls || []) {
        const entry = this.toolEntry(call);
        entry.call = call;
        entry.args.textContent = prettyJson(call.function.arguments);
      }
    } else if (message.role === "tool") {
      this.messages.set(message.id, { ...message });
      const entry = this.toolCalls.get(message.toolCallId);
      if (entry) this.toolResult(entry, message.content, toolFailed(message));
    } else {
      return;
    }
    this.markStatus(messageStatus(message));
  }

  notice(text, isError = false) {
    const node = el("div", isError ? "notice error" : "notice", text);
    this.el.append(node);
    scrollDown();
    return node;
  }

  // A cancelled run closes what it left open (the server sends the missing *_END events just
  // before RUN_FINISHED): remember the text that was still streaming as cut.
  cutStreaming() {
    for (const view of this.views.values()) view.flush();
    for (const bubble of this.texts.values()) {
      if (bubble.classList.contains("streaming")) this.cut.add(bubble);
    }
  }

  // Stop cut the answer short: mark the text that was still streaming, and say so.
  stopped() {
    this.markStatus("stopped");
    const note = this.notice(t("Stopped."));
    note.id = `stopped-${newId()}`;
    this.cutStreaming();
    for (const bubble of this.cut) {
      bubble.classList.add("cut");
      bubble.setAttribute("aria-describedby", note.id);
    }
  }

  // Close what the stream left open (after Stop, a failure or a dropped connection).
  settle() {
    for (const view of this.views.values()) view.flush();
    for (const bubble of this.texts.values()) bubble.classList.remove("streaming");
    for (const block of this.reasoning.values()) {
      if (block.summary.textContent === t("Thinking…")) block.summary.textContent = t("Thinking (stopped)");
    }
    for (const entry of this.toolCalls.values()) {
      if (entry.done) continue;
      if (this.status === "failed") this.toolFailed(entry, "failed: the run ended with an error");
      else entry.result.textContent = "not run";
      for (const message of this.messages.values()) {
        if (message.toolCalls) message.toolCalls = message.toolCalls.filter((c) => c !== entry.call);
      }
    }
  }

  // The AG-UI messages to keep in the transcript: nothing empty, no unanswered tool calls.
  keptMessages() {
    const kept = [];
    for (const message of this.messages.values()) {
      if (message.toolCalls && message.toolCalls.length === 0) delete message.toolCalls;
      const hasContent = typeof message.content === "string" ? message.content.length > 0 : true;
      if (message.role === "assistant" && !hasContent && !message.toolCalls) continue;
      if (message.role === "reasoning" && !hasContent) continue;
      kept.push(message);
    }
    return kept;
  }
}

// Render stored AG-UI messages (a reloaded thread, a snapshot) with the same widgets as a live
// run. Returns the last assistant turn when the transcript ends with one, else null; with
// `open`, that turn is left as it is, for a run in progress to go on in it.
//: A transcript longer than PROGRESSIVE_AFTER messages is painted first as its newest turns
//: only, FIRST_CHUNK messages at a time until they fill FILL_VIEWS times the log's height (the
//: view plus a margin to scroll up into); the earlier ones are filled in above them in chunks of
//: CHUNK_MESSAGES, one task each, keeping the view where it is (docs/benchmarks.md). Every
//: message is in the page once the fill-in ends: find in page, copy, the keyboard and screen
//: readers reach the oldest one as any other.
const PROGRESSIVE_AFTER = 60;
const FIRST_CHUNK = 8;
const FILL_VIEWS = 1.5;
const CHUNK_MESSAGES = 60;
let generation = 0; // bumped by each renderTranscript and clearLog: stale fills stop

// The index of the first user message at or after `index` (turns never split), or `length`.
function turnStart(messages, index) {
  while (index < messages.length && messages[index].role !== "user") index += 1;
  return index;
}

// Where the chunk of about `size` messages ending at `end` (a turn's start, or the length)
// starts: a turn's start, never `end` itself while there are messages before it (a turn
// longer than `size` is taken whole).
function chunkStart(messages, end, size) {
  const start = end > size ? turnStart(messages, end - size) : 0;
  if (start < end) return start;
  let first = end - 1;
  while (first > 0 && messages[first].role !== "user") first -= 1;
  return Math.max(first, 0);
}

// Render a stored transcript; returns the last assistant turn (open when `open`).
// Marks "agent-chat:transcript" (the script's work for the first paint),
// "agent-chat:transcript-painted" (up to the frame after it) and, for a long transcript,
// "agent-chat:transcript-complete" in the Performance timeline: docs/benchmarks.md reads them.
export function renderTranscript(messages, { open = false } = {}) {
  const started = performance.now();
  generation += 1;
  const mine = generation;
  reasoningTimes = timesOf(messages);
  log.querySelectorAll(".turn").forEach((node) => node.remove());
  if (empty) empty.hidden = messages.length > 0;
  const progressive = messages.length > PROGRESSIVE_AFTER;
  let split = progressive ? chunkStart(messages, messages.length, FIRST_CHUNK) : 0;
  batching = true;
  let turn;
  try {
    turn = renderMessages(messages.slice(split), open);
    // Earlier turns until the view is full: one layout per chunk, which the paint needs anyway.
    while (progressive && split > 0 && log.scrollHeight < log.clientHeight * FILL_VIEWS) {
      const from = chunkStart(messages, split, FIRST_CHUNK);
      renderAbove(messages, from, split);
      split = from;
    }
  } finally {
    batching = false;
    scrollDown(true);
  }
  performance.measure("agent-chat:transcript", { start: started, end: performance.now() });
  // The earlier messages fill in after the first frame has painted.
  requestAnimationFrame(() =>
    setTimeout(() => {
      const end = performance.now();
      const detail = {
        turns: log.querySelectorAll(".turn").length,
        filled: log.scrollHeight >= log.clientHeight, // the first paint had the view full
      };
      performance.measure("agent-chat:transcript-painted", { start: started, end, detail });
      if (split > 0) fillIn(messages, split, mine, started);
    }),
  );
  return turn;
}

// Render messages[from:end] above the turns shown, keeping the view where it is.
function renderAbove(messages, from, end) {
  const page = log;
  const anchor = page.querySelector(".turn");
  const holder = document.createElement("div");
  const before = page.scrollHeight;
  const wasBatching = batching;
  log = holder;
  batching = true;
  try {
    renderMessages(messages.slice(from, end), false);
  } finally {
    log = page;
    batching = wasBatching;
  }
  page.insertBefore(fragmentOf(holder), anchor);
  page.scrollTop += page.scrollHeight - before;
}

// Render messages[0:end] above what is shown, a chunk per task, keeping the view where it is.
function fillIn(messages, end, mine, started) {
  setTimeout(() => {
    if (mine !== generation) return;
    const from = chunkStart(messages, end, CHUNK_MESSAGES);
    renderAbove(messages, from, end);
    onFilled();
    if (from > 0) fillIn(messages, from, mine, started);
    else performance.measure("agent-chat:transcript-complete", { start: started, end: performance.now() });
  }, 0);
}

function fragmentOf(holder) {
  const fragment = document.createDocumentFragment();
  fragment.append(...holder.childNodes);
  return fragment;
}

function renderMessages(messages, open) {
  let turn = null;
  for (const message of messages) {
    if (message.role === "user") {
      if (turn) turn.settle();
      turn = null;
      renderUser(textOf(message.content), messageAttachments(message), message.id);
      continue;
    }
    if (!["assistant", "reasoning", "tool"].includes(message.role)) continue;
    if (!turn) turn = new AssistantTurn();
    turn.adopt(message);
  }
  if (turn && !open) turn.settle();
  return turn;
}
