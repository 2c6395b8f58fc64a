// The example project's chat page: streams AG-UI runs from the Django endpoint.
//
// Each turn is one POST of a RunAgentInput (the whole transcript, as every AG-UI client sends)
// whose response body is a server-sent event stream. The page reads it with fetch, splits it
// into frames at blank lines, skips comment frames (the server's ": ping" heartbeats), and
// renders text, tool calls and reasoning as the events arrive. Stop aborts the request.
// Files are uploaded to <agent>/attachments/ as soon as they are chosen and go with the next
// user message as its `attachments` list of {id, name, mime, size} refs, which the server
// stores with the message (and links to the thread, so they live as long as it does).
// The thread drawer (when the server persists conversations) lists, opens, renames (PATCH) and
// deletes (DELETE) the user's threads; on narrow screens it is an overlay behind a toggle.
// Everything untrusted is written with textContent, never innerHTML.
"use strict";

(() => {
  const app = document.getElementById("app");
  const agentUrl = app.dataset.agentUrl;
  const csrfToken = document.querySelector('meta[name="csrf-token"]').content;
  const log = document.getElementById("log");
  const empty = document.getElementById("empty");
  const form = document.getElementById("composer");
  const prompt = document.getElementById("prompt");
  const sendButton = document.getElementById("send");
  const stopButton = document.getElementById("stop");
  const statusLine = document.getElementById("status");
  const threadsPanel = document.getElementById("threads");
  const threadList = document.getElementById("thread-list");
  const threadError = document.getElementById("thread-error");
  const drawerToggle = document.getElementById("drawer-toggle");
  const drawerBackdrop = document.getElementById("drawer-backdrop");
  const narrowScreen = window.matchMedia("(max-width: 760px)");
  const uploadUrl = app.dataset.uploadUrl || null; // unset when uploads are not mounted
  const uploadMaxBytes = Number(app.dataset.uploadMaxBytes || 0);
  const uploadAccept = (app.dataset.uploadAccept || "").split(",").filter(Boolean);
  const attachButton = document.getElementById("attach");
  const attachInput = document.getElementById("attach-input");
  const pendingList = document.getElementById("pending");
  const uploadError = document.getElementById("upload-error");

  let threadId = newId();
  let transcript = []; // AG-UI messages, posted with every run
  let running = null; // {controller, runId, turn} while a run streams
  let threadsAvailable = false;
  let pending = []; // {ref, chip} or {file, chip, uploading: true}: files for the next message
  let threadsRequest = 0; // the latest drawer refresh; older answers are dropped
  let threadsStale = false; // a refresh was skipped while a title was being edited
  let listedIds = []; // the thread ids the drawer shows

  // ---------------------------------------------------------------- helpers

  function newId() {
    if (window.crypto && typeof crypto.randomUUID === "function") {
      return crypto.randomUUID();
    }
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  // A 20px line icon; `paths` are constant SVG path data, never user input.
  function icon(...paths) {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("width", "18");
    svg.setAttribute("height", "18");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("focusable", "false");
    for (const d of paths) {
      const path = document.createElementNS(ns, "path");
      path.setAttribute("d", d);
      path.setAttribute("fill", "none");
      path.setAttribute("stroke", "currentColor");
      path.setAttribute("stroke-width", "2");
      path.setAttribute("stroke-linecap", "round");
      path.setAttribute("stroke-linejoin", "round");
      svg.append(path);
    }
    return svg;
  }

  const PENCIL = ["M12 20h9", "M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z"];
  const TRASH = ["M3 6h18", "M8 6V4h8v2", "M19 6l-1 14H6L5 6", "M10 11v6", "M14 11v6"];

  function prettyJson(text) {
    if (!text) return "{}";
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      return text;
    }
  }

  function setStatus(text, isRunning = false) {
    statusLine.textContent = text;
    statusLine.classList.toggle("running", isRunning);
  }

  function nearBottom() {
    return log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  }

  function scrollDown(force = false) {
    if (force || nearBottom()) log.scrollTop = log.scrollHeight;
  }

  function jsonHeaders() {
    return {
      "Content-Type": "application/json",
      Accept: "text/event-stream",
      "X-CSRFToken": csrfToken,
    };
  }

  function formatSize(bytes) {
    if (bytes < 1024) return `${bytes} B`;
    const units = ["KB", "MB", "GB"];
    let value = bytes / 1024;
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) {
      value /= 1024;
      unit += 1;
    }
    return `${value < 10 && !Number.isInteger(value) ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
  }

  // "text/*, image/*, application/pdf" as a person would say it: "text, images, PDF".
  function describeTypes(types) {
    const names = { "text/*": "text", "image/*": "images", "application/pdf": "PDF", "application/json": "JSON" };
    const words = types.map((type) => names[type] || type);
    return words.length > 1 ? `${words.slice(0, -1).join(", ")} or ${words[words.length - 1]}` : words.join("");
  }

  function attachmentUrl(id) {
    return `${uploadUrl || `${agentUrl}attachments/`}${encodeURIComponent(id)}/`;
  }

  async function errorText(response) {
    try {
      const body = await response.json();
      if (body && typeof body.error === "string") return body.error;
    } catch {
      // not JSON: fall through to the status line
    }
    return `${response.status} ${response.statusText}`.trim();
  }

  // ---------------------------------------------------------------- SSE

  // Yield the JSON payload of each SSE frame in the body; frames end at a blank line (LF LF).
  async function* sseEvents(response) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) !== -1) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = [];
        for (const line of frame.split("\n")) {
          if (line.startsWith(":")) continue; // a comment: the server's heartbeat
          if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length) yield JSON.parse(data.join("\n"));
      }
    }
  }

  // ---------------------------------------------------------------- rendering

  function hideEmpty() {
    if (empty) empty.hidden = true;
  }

  // A download link for each attachment ref a user message carries.
  function fileLinks(refs) {
    const list = el("ul", "file-chips");
    list.setAttribute("aria-label", "Attachments");
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

  function renderUser(text, attachments = []) {
    hideEmpty();
    const turn = el("div", "turn user");
    if (text) turn.append(el("div", "bubble", text));
    if (attachments.length) turn.append(fileLinks(attachments));
    log.append(turn);
    scrollDown(true);
  }

  // The attachment refs of a stored message: its `attachments` list, or `metadata.attachments`.
  function messageAttachments(message) {
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
  class AssistantTurn {
    constructor() {
      hideEmpty();
      this.el = el("div", "turn assistant");
      this.el.setAttribute("aria-label", "Assistant");
      log.append(this.el);
      this.messages = new Map(); // messageId -> AG-UI message
      this.toolCalls = new Map(); // toolCallId -> {call, card}
      this.texts = new Map(); // messageId -> bubble element
      this.reasoning = new Map(); // messageId -> {details, summary, body, started}
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
        bubble = el("div", "bubble text streaming");
        this.texts.set(id, bubble);
        this.el.append(bubble);
      }
      return bubble;
    }

    reasoningBlock(id) {
      let block = this.reasoning.get(id);
      if (!block) {
        const details = el("details", "reasoning");
        details.open = true;
        const summary = el("summary", "", "Thinking…");
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
      return { card, args, result };
    }

    handle(event) {
      switch (event.type) {
        case "TEXT_MESSAGE_START":
          this.message(event.messageId, "assistant");
          break;
        case "TEXT_MESSAGE_CONTENT": {
          const message = this.message(event.messageId, "assistant");
          message.content = (message.content || "") + event.delta;
          this.textBubble(event.messageId).textContent = message.content;
          setStatus("Writing…", true);
          break;
        }
        case "TEXT_MESSAGE_END": {
          const bubble = this.texts.get(event.messageId);
          if (bubble) bubble.classList.remove("streaming");
          break;
        }
        case "TOOL_CALL_START": {
          const parentId = event.parentMessageId || event.toolCallId;
          const parent = this.message(parentId, "assistant");
          const call = {
            id: event.toolCallId,
            type: "function",
            function: { name: event.toolCallName, arguments: "" },
          };
          parent.toolCalls = [...(parent.toolCalls || []), call];
          this.toolCalls.set(event.toolCallId, { call, ...this.toolCard(event.toolCallId, event.toolCallName) });
          setStatus(`Calling ${event.toolCallName}…`, true);
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
          const entry = this.toolCalls.get(event.toolCallId);
          if (entry) {
            entry.result.classList.remove("pending");
            entry.result.textContent = event.content;
            entry.done = true;
          }
          break;
        }
        case "REASONING_MESSAGE_START":
          this.message(event.messageId, "reasoning").content = "";
          this.reasoningBlock(event.messageId);
          setStatus("Thinking…", true);
          break;
        case "REASONING_MESSAGE_CONTENT": {
          const message = this.message(event.messageId, "reasoning");
          message.content = (message.content || "") + event.delta;
          this.reasoningBlock(event.messageId).body.textContent = message.content;
          break;
        }
        case "REASONING_MESSAGE_END": {
          const block = this.reasoning.get(event.messageId);
          if (block) {
            const seconds = Math.max(1, Math.round((performance.now() - block.started) / 1000));
            block.summary.textContent = `Thought for ${seconds} s`;
            block.details.open = false;
          }
          break;
        }
        case "REASONING_ENCRYPTED_VALUE":
          if (event.subtype === "tool-call") {
            const entry = this.toolCalls.get(event.entityId);
            if (entry) entry.call.encryptedValue = event.encryptedValue;
          } else if (this.messages.has(event.entityId)) {
            this.messages.get(event.entityId).encryptedValue = event.encryptedValue;
          }
          break;
        case "RUN_ERROR":
          this.notice(event.message || "The run failed.", true);
          break;
        default:
          break; // RUN_STARTED, RUN_FINISHED, REASONING_START/END, STEP_*, state events
      }
      scrollDown();
    }

    notice(text, isError = false) {
      const node = el("div", isError ? "notice error" : "notice", text);
      this.el.append(node);
      scrollDown();
      return node;
    }

    // Stop cut the answer short: mark the text that was still streaming, and say so.
    stopped() {
      const note = this.notice("Stopped.");
      note.id = `stopped-${newId()}`;
      for (const bubble of this.texts.values()) {
        if (!bubble.classList.contains("streaming")) continue;
        bubble.classList.add("cut");
        bubble.setAttribute("aria-describedby", note.id);
      }
    }

    // Close what the stream left open (after Stop or a dropped connection).
    settle() {
      for (const bubble of this.texts.values()) bubble.classList.remove("streaming");
      for (const block of this.reasoning.values()) {
        if (block.summary.textContent === "Thinking…") block.summary.textContent = "Thinking (stopped)";
      }
      for (const entry of this.toolCalls.values()) {
        if (!entry.done) {
          entry.result.textContent = "not run";
          for (const message of this.messages.values()) {
            if (message.toolCalls) message.toolCalls = message.toolCalls.filter((c) => c !== entry.call);
          }
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

  // Render stored AG-UI messages (a reloaded thread) with the same widgets as a live run.
  function renderTranscript(messages) {
    log.querySelectorAll(".turn").forEach((node) => node.remove());
    let turn = null;
    for (const message of messages) {
      if (message.role === "user") {
        turn = null;
        const text = typeof message.content === "string"
          ? message.content
          : (message.content || []).filter((p) => p.type === "text").map((p) => p.text).join("\n");
        renderUser(text, messageAttachments(message));
        continue;
      }
      if (!turn) turn = new AssistantTurn();
      if (message.role === "reasoning") {
        const block = turn.reasoningBlock(message.id);
        block.body.textContent = message.content || "";
        // How long it took is not stored; the label still reads like the live one.
        block.summary.textContent = "Thought process";
        block.details.open = false;
      } else if (message.role === "assistant") {
        if (message.content) {
          const bubble = turn.textBubble(message.id);
          bubble.textContent = message.content;
          bubble.classList.remove("streaming");
        }
        for (const call of message.toolCalls || []) {
          const entry = { call, ...turn.toolCard(call.id, call.function.name) };
          entry.args.textContent = prettyJson(call.function.arguments);
          turn.toolCalls.set(call.id, entry);
        }
      } else if (message.role === "tool") {
        const entry = turn.toolCalls.get(message.toolCallId);
        if (entry) {
          entry.result.classList.remove("pending");
          entry.result.textContent = message.content;
          entry.done = true;
        }
      }
    }
    if (turn) turn.settle();
    if (empty) empty.hidden = messages.length > 0;
    scrollDown(true);
  }

  // ---------------------------------------------------------------- runs

  function setRunning(isRunning) {
    // While busy, screen readers wait for the finished answer instead of every word.
    log.setAttribute("aria-busy", String(isRunning));
    sendButton.disabled = isRunning || pending.some((entry) => entry.uploading);
    stopButton.disabled = !isRunning;
    form.classList.toggle("running", isRunning); // narrow screens show Stop in place of Send
    prompt.readOnly = isRunning;
  }

  async function send(text) {
    if (running || !text.trim()) return;
    const userMessage = { id: newId(), role: "user", content: text };
    const sent = takePending();
    if (sent.length) userMessage.attachments = sent;
    transcript.push(userMessage);
    renderUser(text, sent);
    const turn = new AssistantTurn();
    const controller = new AbortController();
    const runId = newId();
    const runThreadId = threadId; // "New chat" may move on before the run has ended
    running = { controller, runId, turn };
    setRunning(true);
    setStatus("Waiting for the agent…", true);

    const body = {
      threadId,
      runId,
      state: {},
      messages: transcript,
      tools: [],
      context: [],
      forwardedProps: {},
    };
    let outcome = null; // "finished" or "error", from the run's terminal event; or "stopped"
    try {
      const response = await fetch(agentUrl, {
        method: "POST",
        headers: jsonHeaders(),
        body: JSON.stringify(body),
        credentials: "same-origin",
        signal: controller.signal,
      });
      if (!response.ok) {
        transcript.pop(); // the server did not take the message: do not send it twice
        restorePending(sent);
        turn.notice(`The server refused the run: ${await errorText(response)}`, true);
        setStatus("Error");
        outcome = "refused";
        return;
      }
      for await (const event of sseEvents(response)) {
        turn.handle(event);
        if (event.type === "RUN_FINISHED") outcome = "finished";
        else if (event.type === "RUN_ERROR") outcome = "error";
      }
      // The status changes only once the response has ended, together with the buttons.
      if (outcome === "finished") {
        setStatus("Done");
      } else if (outcome === "error") {
        setStatus("Error");
      } else {
        turn.notice("The connection closed before the run finished.", true);
        setStatus("Interrupted");
      }
    } catch (error) {
      if (error.name === "AbortError") {
        turn.stopped();
        setStatus("Stopped");
        outcome = "stopped";
      } else {
        turn.notice(`Something went wrong: ${error.message}`, true);
        setStatus("Error");
      }
    } finally {
      turn.settle();
      transcript.push(...turn.keptMessages());
      running = null;
      setRunning(false);
      prompt.focus();
      refreshAfterRun(runThreadId, outcome);
    }
  }

  // Aborting the request closes the connection; the server notices and ends the run.
  function stop() {
    if (running) running.controller.abort();
  }

  function newChat() {
    if (running) stop();
    threadId = newId();
    transcript = [];
    log.querySelectorAll(".turn").forEach((node) => node.remove());
    if (empty) empty.hidden = false;
    setStatus("");
    markCurrentThread();
    closeDrawer();
    prompt.focus();
  }

  // ---------------------------------------------------------------- attachments (when mounted)

  function showUploadError(text, status = "") {
    uploadError.textContent = text;
    uploadError.dataset.status = String(status);
    uploadError.hidden = false;
  }

  function clearUploadError() {
    uploadError.hidden = true;
    uploadError.textContent = "";
    delete uploadError.dataset.status;
  }

  function updatePending() {
    pendingList.hidden = pending.length === 0;
    sendButton.disabled = Boolean(running) || pending.some((entry) => entry.uploading);
  }

  function pendingChip(name, size) {
    const chip = el("li", "file-chip uploading");
    chip.append(el("span", "file-name", name), el("span", "file-size", `${formatSize(size)} · uploading…`));
    pendingList.append(chip);
    return chip;
  }

  // Turn an uploading chip into an attached one: name, size and a remove button.
  function attachedChip(entry) {
    const { ref, chip } = entry;
    chip.classList.remove("uploading");
    chip.replaceChildren(el("span", "file-name", ref.name), el("span", "file-size", formatSize(ref.size)));
    chip.dataset.attachmentId = ref.id;
    const remove = el("button", "file-remove", "×");
    remove.type = "button";
    remove.setAttribute("aria-label", `Remove ${ref.name}`);
    remove.title = "Remove";
    remove.addEventListener("click", () => removeAttachment(entry));
    chip.append(remove);
  }

  function uploadRefusal(file, status, detail) {
    if (status === 413 || (status === null && uploadMaxBytes && file.size > uploadMaxBytes)) {
      return `“${file.name}” is too large: files can be at most ${formatSize(uploadMaxBytes)}.`;
    }
    if (status === 415) {
      const allowed = uploadAccept.length ? ` Attach ${describeTypes(uploadAccept)} files.` : "";
      return `“${file.name}” is a type of file this agent does not accept (${file.type || "unknown type"}).${allowed}`;
    }
    return `Could not attach “${file.name}”: ${detail}`;
  }

  async function upload(file) {
    const entry = { file, chip: pendingChip(file.name, file.size), uploading: true };
    pending.push(entry);
    updatePending();
    const data = new FormData();
    data.append("file", file);
    let response = null;
    let detail = "";
    try {
      response = await fetch(uploadUrl, {
        method: "POST",
        headers: { "X-CSRFToken": csrfToken, Accept: "application/json" },
        body: data,
        credentials: "same-origin",
      });
      if (response.status === 201) {
        entry.ref = await response.json();
      } else {
        detail = await errorText(response);
      }
    } catch (error) {
      // No answer at all (status null). For an oversized file that can mean the server
      // refused it and closed the connection before the browser could read the 413.
      detail = error.message;
    }
    entry.uploading = false;
    if (entry.ref) {
      attachedChip(entry);
    } else {
      pending = pending.filter((other) => other !== entry);
      entry.chip.remove();
      const status = response ? response.status : null;
      showUploadError(uploadRefusal(file, status, detail), status ?? "");
    }
    updatePending();
  }

  async function removeAttachment(entry) {
    pending = pending.filter((other) => other !== entry);
    entry.chip.remove();
    updatePending();
    try {
      const response = await fetch(attachmentUrl(entry.ref.id), {
        method: "DELETE",
        headers: { "X-CSRFToken": csrfToken },
        credentials: "same-origin",
      });
      if (!response.ok) showUploadError(`Could not delete “${entry.ref.name}”: ${await errorText(response)}`);
    } catch (error) {
      showUploadError(`Could not delete “${entry.ref.name}”: ${error.message}`);
    }
  }

  function attachFiles(files) {
    if (!uploadUrl) return;
    clearUploadError();
    for (const file of files) upload(file);
  }

  // The refs of the attached files, for the message being sent; the composer is emptied.
  function takePending() {
    const refs = [];
    for (const entry of pending) {
      if (entry.uploading || !entry.ref) continue;
      refs.push(entry.ref);
      entry.chip.remove();
    }
    pending = pending.filter((entry) => entry.uploading);
    if (uploadUrl) {
      clearUploadError();
      updatePending();
    }
    return refs;
  }

  // Put refs back in the composer (the server refused the message they went with).
  function restorePending(refs) {
    for (const ref of refs) {
      const entry = { ref, chip: pendingChip(ref.name, ref.size) };
      attachedChip(entry);
      pending.push(entry);
    }
    if (uploadUrl) updatePending();
  }

  // ---------------------------------------------------------------- threads (when mounted)

  function threadItems(payload) {
    if (Array.isArray(payload)) return payload;
    for (const key of ["threads", "conversations", "items", "results"]) {
      if (payload && Array.isArray(payload[key])) return payload[key];
    }
    return [];
  }

  function showThreadError(text) {
    threadError.textContent = text;
    threadError.hidden = !text;
  }

  function markCurrentThread() {
    threadList.querySelectorAll(".thread-open").forEach((button) => {
      button.setAttribute("aria-current", String(button.dataset.threadId === threadId));
    });
  }

  function setThreadsAvailable(available) {
    threadsAvailable = available;
    threadsPanel.hidden = !available;
    drawerToggle.hidden = !available;
    app.classList.toggle("has-threads", available);
    if (!available) closeDrawer();
  }

  // The item's own button for `id` (after a re-render the old node is gone).
  function threadButton(id, className) {
    return Array.from(threadList.querySelectorAll(`.${className}`)).find((b) => b.dataset.threadId === id);
  }

  function threadItem(item, index) {
    const id = item.threadId || item.id || item.thread_id;
    const title = item.title || "Untitled conversation";
    const li = el("li", "thread");
    li.dataset.threadId = id;

    // The title may be cut to fit: the tooltip has all of it; the preview is a second line.
    const open = el("button", "thread-open");
    open.type = "button";
    open.dataset.threadId = id;
    open.title = title;
    open.append(el("span", "thread-title", title));
    if (item.preview) {
      const preview = el("span", "thread-preview", item.preview);
      preview.id = `thread-preview-${index}`;
      preview.setAttribute("aria-hidden", "true");
      open.append(preview);
      open.setAttribute("aria-describedby", preview.id);
    }
    open.addEventListener("click", () => openThread(id));

    const actions = el("div", "thread-actions");
    const rename = el("button", "icon-button thread-rename");
    rename.type = "button";
    rename.dataset.threadId = id;
    rename.title = "Rename";
    rename.setAttribute("aria-label", `Rename “${title}”`);
    rename.append(icon(...PENCIL));
    rename.addEventListener("click", () => startRename(li, id, title));
    const remove = el("button", "icon-button thread-delete");
    remove.type = "button";
    remove.dataset.threadId = id;
    remove.title = "Delete";
    remove.setAttribute("aria-label", `Delete “${title}”`);
    remove.append(icon(...TRASH));
    remove.addEventListener("click", () => deleteThread(id, title));
    actions.append(rename, remove);

    li.append(open, actions);
    return li;
  }

  async function loadThreads() {
    // An open title editor would be lost: refresh once it has closed.
    if (threadList.querySelector(".rename-form")) {
      threadsStale = true;
      return false;
    }
    const request = ++threadsRequest;
    let response;
    let items;
    try {
      response = await fetch(`${agentUrl}threads/?limit=50`, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      items = response.ok ? threadItems(await response.json()) : null;
    } catch {
      return false;
    }
    if (request !== threadsRequest) return false; // a newer refresh has the last word
    if (!items) {
      setThreadsAvailable(false);
      return false;
    }
    if (threadList.querySelector(".rename-form")) {
      threadsStale = true;
      return false;
    }
    setThreadsAvailable(true);
    threadsStale = false;
    const active = document.activeElement;
    const focusedId = threadList.contains(active) ? active.dataset.threadId : null;
    const focusedClass = ["thread-open", "thread-rename", "thread-delete"].find((name) => active.classList.contains(name));
    listedIds = items.map((item) => item.threadId || item.id || item.thread_id);
    threadList.replaceChildren();
    if (!items.length) {
      threadList.append(el("li", "none", "No conversations yet."));
    }
    items.forEach((item, index) => threadList.append(threadItem(item, index)));
    markCurrentThread();
    // A refresh must not throw keyboard focus back to the top of the page.
    if (focusedId && focusedClass) {
      const again = threadButton(focusedId, focusedClass);
      if (again) again.focus();
    }
    return true;
  }

  // Refresh the drawer once a run has ended. A finished run is saved by the time its stream
  // ends; a stopped (or broken) one only once the server has noticed the disconnect, normally
  // within milliseconds: look again a few times until the thread is listed.
  async function refreshAfterRun(id, outcome) {
    if (!threadsAvailable) return;
    if (outcome === "refused") {
      await loadThreads();
      return;
    }
    const delays = outcome === "finished" ? [0, 400, 1000] : [300, 700, 1500, 3000];
    for (const delay of delays) {
      if (delay) await sleep(delay);
      await loadThreads();
      if (listedIds.includes(id)) return;
    }
  }

  async function openThread(id) {
    if (running) return;
    const response = await fetch(`${agentUrl}threads/${encodeURIComponent(id)}/`, {
      headers: { Accept: "application/json" },
      credentials: "same-origin",
    });
    if (!response.ok) {
      setStatus(`Could not open the conversation: ${await errorText(response)}`);
      return;
    }
    const payload = await response.json();
    threadId = id;
    transcript = Array.isArray(payload.messages) ? payload.messages : [];
    renderTranscript(transcript);
    setStatus("");
    markCurrentThread();
    if (isDrawerOpen()) {
      closeDrawer();
      prompt.focus();
    }
  }

  // Rename in place: a small form replaces the item until it is saved or cancelled.
  function startRename(li, id, title) {
    const other = threadList.querySelector(".rename-form");
    if (other) other.cancel();
    showThreadError("");
    const form = el("form", "rename-form");
    form.noValidate = true; // the server's own 400 message is shown instead
    const input = el("input");
    input.type = "text";
    input.value = title;
    input.setAttribute("aria-label", "New title");
    const error = el("p", "rename-error");
    error.id = `rename-error-${newId()}`;
    error.setAttribute("role", "alert");
    error.hidden = true;
    input.setAttribute("aria-describedby", error.id);
    const save = el("button", "button primary small", "Save");
    save.type = "submit";
    const cancel = el("button", "button ghost small", "Cancel");
    cancel.type = "button";
    const buttons = el("div", "rename-buttons");
    buttons.append(save, cancel);
    form.append(input, buttons, error);
    li.classList.add("editing");
    li.append(form);
    input.focus();
    input.select();

    const close = async (renamed) => {
      form.remove();
      li.classList.remove("editing");
      if (renamed || threadsStale) await loadThreads();
      const back = threadButton(id, "thread-rename");
      if (back) back.focus();
    };
    form.cancel = () => close(false);
    cancel.addEventListener("click", () => close(false));
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation(); // Escape cancels the edit, not the whole drawer
        close(false);
      }
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const showError = (text) => {
        error.textContent = text;
        error.hidden = false;
        input.setAttribute("aria-invalid", "true");
        input.focus();
      };
      if (!input.value.trim()) {
        showError("Type a title, or press Cancel.");
        return;
      }
      save.disabled = true;
      try {
        const response = await fetch(`${agentUrl}threads/${encodeURIComponent(id)}/`, {
          method: "PATCH",
          headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken },
          body: JSON.stringify({ title: input.value }),
          credentials: "same-origin",
        });
        if (response.ok) {
          await close(true);
          return;
        }
        showError(`Could not rename: ${await errorText(response)}`);
      } catch (caught) {
        showError(`Could not rename: ${caught.message}`);
      } finally {
        save.disabled = false;
      }
    });
  }

  async function deleteThread(id, title) {
    showThreadError("");
    if (running && id === threadId) {
      showThreadError("Stop the answer before deleting this conversation.");
      return;
    }
    if (!window.confirm(`Delete “${title}”? This cannot be undone.`)) return;
    const index = listedIds.indexOf(id);
    let response;
    try {
      response = await fetch(`${agentUrl}threads/${encodeURIComponent(id)}/`, {
        method: "DELETE",
        headers: { "X-CSRFToken": csrfToken },
        credentials: "same-origin",
      });
    } catch (caught) {
      showThreadError(`Could not delete “${title}”: ${caught.message}`);
      return;
    }
    if (!response.ok) {
      showThreadError(`Could not delete “${title}”: ${await errorText(response)}`);
      return;
    }
    const wasOpen = id === threadId;
    if (wasOpen) newChat();
    await loadThreads();
    if (!wasOpen) {
      // Keep the keyboard where it was: on the next conversation, else the previous one.
      const next = listedIds[Math.min(index, listedIds.length - 1)];
      const target = next ? threadButton(next, "thread-open") : document.getElementById("new-chat");
      if (target) target.focus();
    }
  }

  // ---------------------------------------------------------------- drawer (narrow screens)

  function isDrawerOpen() {
    return app.classList.contains("drawer-open");
  }

  function openDrawer() {
    app.classList.add("drawer-open");
    drawerToggle.setAttribute("aria-expanded", "true");
    drawerBackdrop.hidden = false;
    const current = threadList.querySelector('.thread-open[aria-current="true"]') || threadList.querySelector(".thread-open");
    (current || document.getElementById("reload-threads")).focus();
  }

  function closeDrawer() {
    if (!isDrawerOpen()) return;
    app.classList.remove("drawer-open");
    drawerToggle.setAttribute("aria-expanded", "false");
    drawerBackdrop.hidden = true;
    if (threadsPanel.contains(document.activeElement)) drawerToggle.focus();
  }

  // ---------------------------------------------------------------- wiring

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = prompt.value;
    if (!text.trim() || running || pending.some((entry) => entry.uploading)) return;
    prompt.value = "";
    prompt.style.height = "";
    send(text);
  });

  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  prompt.addEventListener("input", () => {
    prompt.style.height = "auto";
    prompt.style.height = `${Math.min(prompt.scrollHeight, 192)}px`;
  });

  stopButton.addEventListener("click", stop);
  document.getElementById("new-chat").addEventListener("click", newChat);
  document.getElementById("reload-threads").addEventListener("click", () => {
    showThreadError("");
    loadThreads();
  });
  drawerToggle.addEventListener("click", () => (isDrawerOpen() ? closeDrawer() : openDrawer()));
  drawerBackdrop.addEventListener("click", closeDrawer);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && isDrawerOpen()) {
      closeDrawer();
      drawerToggle.focus();
    }
  });
  narrowScreen.addEventListener("change", () => {
    if (!narrowScreen.matches) closeDrawer();
  });
  document.querySelectorAll(".chip").forEach((chip) => {
    chip.addEventListener("click", () => send(chip.dataset.prompt));
  });

  if (uploadUrl) {
    const limits = [];
    if (uploadAccept.length) limits.push(describeTypes(uploadAccept));
    if (uploadMaxBytes) limits.push(`up to ${formatSize(uploadMaxBytes)} each`);
    const hint = `Attach a file${limits.length ? ` (${limits.join(", ")})` : ""}; it goes with your next message.`;
    attachButton.title = hint;
    document.getElementById("attach-hint").textContent = hint;
    attachButton.addEventListener("click", () => attachInput.click());
    attachInput.addEventListener("change", () => {
      attachFiles(Array.from(attachInput.files));
      attachInput.value = ""; // choosing the same file again fires "change" again
    });
    form.addEventListener("dragover", (event) => {
      if (!event.dataTransfer || !Array.from(event.dataTransfer.types).includes("Files")) return;
      event.preventDefault();
      form.classList.add("dropping");
    });
    form.addEventListener("dragleave", () => form.classList.remove("dropping"));
    form.addEventListener("drop", (event) => {
      form.classList.remove("dropping");
      if (!event.dataTransfer || !event.dataTransfer.files.length) return;
      event.preventDefault();
      attachFiles(Array.from(event.dataTransfer.files));
    });
  }

  loadThreads();
  prompt.focus();
})();
