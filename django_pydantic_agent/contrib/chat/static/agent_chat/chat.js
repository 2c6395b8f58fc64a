// django_pydantic_agent.contrib.chat: streams AG-UI runs from the Django endpoint.
//
// An ES module, no build step: this file wires the page and owns the run lifecycle; the
// pieces live beside it in modules/ (transport, state and router, rendering, composer, thread
// drawer). Each turn is one POST of a RunAgentInput (its new message when the server keeps the
// thread, else the whole transcript) whose response is a server-sent event stream, rendered
// as it arrives.
//
// - Stop asks the server to cancel the run (POST runs/<thread>/<run>/cancel/) and keeps
//   reading until the stream's terminal event (RUN_FINISHED, outcome cancelled). A server
//   without that route (404 or 405) gets the old behaviour: the request is aborted.
// - The live run (thread, run id, last sequence number seen) is kept in sessionStorage, and a
//   thread's `active_run` names it too: after a reload the page opens the thread from the URL
//   (/?thread=<id>) and reattaches (GET runs/<thread>/<run>/?after=0), rendering the replayed
//   events or the MESSAGES_SNAPSHOT it opens with, then the live tail. A connection that drops
//   mid-run is picked up again from the last sequence number seen.
// - Opening a thread pushes /?thread=<id>; Back and Forward open what the URL names.
// - Edit, regenerate, ‹ 2/3 › and fork live in modules/actions.js; a regenerate or an edit
//   runs here (rerun), on the transcript cut at the user message.
// Everything untrusted is written with textContent, never innerHTML.

import { createMessageActions } from "./modules/actions.js";
import { createComposer } from "./modules/composer.js";
import { AssistantTurn, clearLog, renderTranscript, renderUser, scrollDown, setupRendering } from "./modules/render.js";
import { activeRunOf, liveRun, onHistoryMove, showThreadInUrl, state, threadInUrl } from "./modules/state.js";
import { createThreadDrawer } from "./modules/threads.js";
import { createTransport, errorText, parseEventId, sseFrames } from "./modules/transport.js";
import { el, newId, retryAfter, t } from "./modules/util.js";

const app = document.getElementById("app");
const log = document.getElementById("log");
const statusLine = document.getElementById("status");

const transport = createTransport({
  agentUrl: app.dataset.agentUrl,
  csrfToken: app.dataset.csrfToken,
  uploadUrl: app.dataset.uploadUrl || null, // unset when uploads are not mounted
});

//: How long a cancelled run may take to send its terminal event before the request is aborted.
const CANCEL_GRACE_MS = 10000;
//: Reconnects after a stream that ended without a terminal event, before giving up.
const RECONNECTS = 2;

const usageLine = document.getElementById("thread-usage");

// "This conversation: 1,234 tokens, $0.0123" from GET usage/; hidden when there is nothing to
// show (a new chat, a server without the route, a failure).
async function showUsage(threadId) {
  usageLine.hidden = true;
  if (!threadId) return;
  let payload;
  try {
    const response = await transport.getUsage(threadId);
    if (!response.ok) return;
    payload = await response.json();
  } catch {
    return;
  }
  const thread = payload && payload.thread;
  if (!thread || !thread.runs || state.threadId !== threadId) return;
  const tokens = `${Number(thread.totalTokens).toLocaleString("en")} tokens`;
  const priced = thread.runs - thread.unpricedRuns;
  let cost = priced ? `$${thread.costUsd}` : "cost unknown";
  if (priced && thread.unpricedRuns) cost += ` (+${thread.unpricedRuns} unpriced)`;
  usageLine.textContent = `This conversation: ${tokens}, ${cost}`;
  usageLine.hidden = false;
}

function setStatus(text, isRunning = false) {
  statusLine.textContent = text;
  statusLine.classList.toggle("running", isRunning);
}

setupRendering({
  log,
  empty: document.getElementById("empty"),
  attachmentUrl: (id) => transport.attachmentUrl(id),
  // "Writing…" and friends, except while a Stop is on its way: that says "Stopping…".
  onActivity: (text, isRunning) => {
    if (!(state.running && state.running.stopping)) setStatus(text, isRunning);
  },
  onFilled: () => actions.decorate({ fresh: true }), // the earlier turns of a long thread get their buttons
});

const composer = createComposer({
  transport,
  uploadMaxBytes: Number(app.dataset.uploadMaxBytes || 0),
  uploadAccept: (app.dataset.uploadAccept || "").split(",").filter(Boolean),
  onSubmit: (text) => send(text),
});

const drawer = createThreadDrawer({
  app,
  transport,
  onOpen: (id) => openThread(id),
  onDeleted: () => newChat({ history: "replace" }),
});

const actions = createMessageActions({
  app,
  log,
  transport,
  rerun: (transcript) => rerun(transcript),
  reopen: () => openThread(state.threadId, { history: "none" }),
  openForked: async (id) => {
    await openThread(id);
    drawer.load();
  },
  setStatus: (text) => setStatus(text),
});

function setRunning(isRunning) {
  // While busy, screen readers wait for the finished answer instead of every word.
  log.setAttribute("aria-busy", String(isRunning));
  composer.setRunning(isRunning);
}

// ---------------------------------------------------------------- runs

// RUN_FINISHED's outcome as "finished", "cancelled" or "interrupt" (absent means success).
function finishedOutcome(outcome) {
  const type = outcome && typeof outcome === "object" ? outcome.type : outcome;
  if (type === "cancelled" || type === "interrupt") return type;
  return "finished";
}

// A MESSAGES_SNAPSHOT: the whole conversation when it holds a user message (the page shows it
// afresh and the run goes on in its last turn), else messages of the current turn.
function applySnapshot(run, messages) {
  if (!Array.isArray(messages)) return;
  if (messages.some((message) => message.role === "user")) {
    state.transcript = messages.map((message) => ({ ...message }));
    run.turn = renderTranscript(state.transcript, { open: true }) || new AssistantTurn();
  } else {
    for (const message of messages) run.turn.adopt(message);
  }
}

// Render one response's events into the run's turn; returns "finished", "cancelled",
// "interrupt" or "error" from its terminal event, or null when the stream ended without one.
// `replay`: the stream starts the run over (a reattach after a reload), so a message the page
// already shows from storage is rebuilt from its start event instead of doubled.
async function readRun(run, response, { replay = false } = {}) {
  let snapshotSeen = false;
  let outcome = null;
  // *_END events wait for the next event: when that is a cancelled RUN_FINISHED, the server
  // closed them because of the cancel, and the text they end was cut short.
  let ends = [];
  // Read to the end of the body: the status changes only once the response has ended.
  for await (const { event, id } of sseFrames(response)) {
    if (outcome !== null) continue; // nothing comes after the terminal event
    const position = parseEventId(id);
    if (position) {
      run.runId = position.runId; // the server's name for the run is the one to reattach to
      run.lastSeq = position.seq;
      run.resumable = true;
      if (!run.detached) liveRun.save(run.threadId, run.runId, run.lastSeq);
    }
    if (event.type.endsWith("_END")) {
      if (replay && !snapshotSeen) event.replay = true;
      ends.push(event);
      continue;
    }
    if (event.type === "RUN_FINISHED" && finishedOutcome(event.outcome) === "cancelled") {
      run.turn.cutStreaming();
    }
    for (const end of ends) run.turn.handle(end);
    ends = [];
    if (event.type === "MESSAGES_SNAPSHOT") {
      applySnapshot(run, event.messages);
      snapshotSeen = true;
      continue;
    }
    if (replay && !snapshotSeen) event.replay = true;
    run.turn.handle(event);
    if (event.type === "RUN_FINISHED") outcome = finishedOutcome(event.outcome);
    else if (event.type === "RUN_ERROR") outcome = "error";
  }
  for (const end of ends) run.turn.handle(end);
  return outcome;
}

// Follow a run's stream to its end, reattaching (after the last sequence number seen) when
// the connection drops first; then settle the turn and the page. `first` is the response (or
// its promise) to read first; `refused(response)` handles a first answer that is not 2xx;
// `replay` as for readRun.
async function follow(run, first, { replay = false, refused = null, failed = null } = {}) {
  let outcome = null;
  try {
    let response;
    try {
      response = await first;
    } catch (error) {
      // No answer at all (offline, connection refused): nothing of this run exists anywhere.
      if (!failed || error.name === "AbortError") throw error;
      failed(error);
      outcome = "refused";
      setStatus(t("Error"));
      return;
    }
    if (!response.ok) {
      if (refused) await refused(response);
      outcome = "refused";
      setStatus(t("Error"));
      return;
    }
    outcome = await readRun(run, response, { replay });
    for (let attempt = 0; outcome === null && run.resumable && attempt < RECONNECTS; attempt += 1) {
      if (run.detached || run.controller.signal.aborted) break;
      setStatus(t("Reconnecting…"), true);
      const again = await transport.reattachRun(run.threadId, run.runId, run.lastSeq, run.controller.signal);
      if (!again.ok) break;
      outcome = await readRun(run, again);
    }
    if (run.detached) return;
    if (outcome === "finished" || outcome === "interrupt") {
      setStatus(outcome === "interrupt" ? t("Waiting for an answer") : t("Done"));
    } else if (outcome === "cancelled") {
      run.turn.stopped();
      setStatus(t("Stopped"));
    } else if (outcome === "error") {
      setStatus(t("Error"));
    } else {
      run.turn.notice(t("The connection closed before the run finished."), true);
      setStatus(t("Interrupted"));
    }
  } catch (error) {
    if (run.detached) return;
    if (error.name === "AbortError") {
      run.turn.stopped();
      setStatus(t("Stopped"));
      outcome = "stopped";
    } else {
      run.turn.notice(t("Something went wrong: {why}", { why: error.message }), true);
      setStatus(t("Error"));
    }
  } finally {
    clearTimeout(run.cancelTimer);
    endRun(run, outcome);
  }
}

// Keep the turn's messages in the transcript (one entry per message id) and free the page.
function endRun(run, outcome) {
  // A run that ended (or was given up) is forgotten; one whose stream merely dropped may still
  // be going on the server, and a reload will try to reattach to it.
  // A page being unloaded (a reload) keeps it whatever its stream says on the way out.
  if (!run.unloading && (outcome !== null || !run.resumable)) liveRun.clear(run.runId);
  if (run.detached) {
    drawer.refreshAfterRun(run.threadId, outcome || "stopped");
    return;
  }
  run.turn.settle();
  for (const message of run.turn.keptMessages()) {
    const index = state.transcript.findIndex((other) => other.id === message.id);
    if (index === -1) state.transcript.push(message);
    else state.transcript[index] = message;
  }
  if (state.running === run) {
    state.running = null;
    setRunning(false);
  }
  composer.focus();
  drawer.refreshAfterRun(run.threadId, outcome);
  showUsage(run.threadId);
  actions.afterRun(run.threadId);
}

function beginRun(threadId, runId, turn) {
  const run = { threadId, runId, lastSeq: 0, turn, controller: new AbortController(), resumable: false };
  state.running = run;
  setRunning(true);
  return run;
}

async function send(text) {
  if (state.running || !text.trim()) return;
  const userMessage = { id: newId(), role: "user", content: text };
  const sent = composer.takePending();
  if (sent.length) userMessage.attachments = sent;
  state.transcript.push(userMessage);
  renderUser(text, sent, userMessage.id);
  // A new chat gets its address with its first message: /?thread=<id> can be linked.
  showThreadInUrl(state.threadId, { replace: threadInUrl() === null });
  const run = beginRun(state.threadId, newId(), new AssistantTurn());
  setStatus(t("Waiting for the agent…"), true);
  liveRun.save(run.threadId, run.runId, 0);
  await follow(run, transport.startRun(runBody(run), run.controller.signal), {
    refused: async (response) => {
      sendFailed(run, userMessage, text, sent, t("The server refused the message: {why}", { why: await refusal(response) }));
    },
    failed: () => {
      sendFailed(run, userMessage, text, sent, t("The message was not sent: {why}", { why: unreached() }));
    },
  });
}

// Why a request never reached the server, in words: the browser is offline, or the connection
// failed or dropped on the way (fetch says only "Failed to fetch").
function unreached() {
  if (navigator.onLine === false) return t("You are offline: try again when the connection is back.");
  return t("The connection to the server was lost before it arrived.");
}

// Why the server refused a run: its JSON error, or for 429 and 503 when to try again.
async function refusal(response) {
  if (response.status === 429 || response.status === 503) {
    const when = retryAfter(response);
    return `${response.status === 429 ? t("Too many requests.") : t("The server is busy.")} ${when || t("Try again in a moment.")}`;
  }
  return errorText(response);
}

// A server that keeps the thread sends the model its own history and checks what a client
// posts against it (server-authoritative), so a run posts only what is new: the transcript
// from its last user message on (the question sent, or the one a regenerate or an edit cuts
// at). Posting the rest would cost every turn the thread's length, and past the server's body
// cap a long conversation could not go on. Without a stored thread the transcript is the
// history, and a run posts all of it.
const storedHistory = app.dataset.history === "stored";

function postedMessages(transcript) {
  if (!storedHistory) return transcript;
  let last = transcript.length - 1;
  while (last > 0 && transcript[last].role !== "user") last -= 1;
  return transcript.slice(last);
}

// The RunAgentInput of a run.
function runBody(run) {
  return {
    threadId: run.threadId,
    runId: run.runId,
    state: {},
    messages: postedMessages(state.transcript),
    tools: [],
    context: [],
    forwardedProps: {},
  };
}

// Regenerate or edit: run on `transcript`, the history cut at a user message (its text changed
// for an edit). The server starts a new branch there. When it refuses the run (or never gets
// it), nothing changed: the page shows the stored thread again, reloaded from the server, and
// says why. Offline, the reload fails too: the page shows the thread as it was before the
// rerun (what the server last said it stores) and reloads it when the connection is back.
async function rerun(transcript) {
  if (state.running) return;
  const threadId = state.threadId;
  const stored = { messages: state.transcript, branches: actions.branchPoints() };
  state.transcript = transcript;
  const run = beginRun(threadId, newId(), new AssistantTurn());
  setStatus(t("Waiting for the agent…"), true);
  liveRun.save(run.threadId, run.runId, 0);
  let why = null;
  await follow(run, transport.startRun(runBody(run), run.controller.signal), {
    refused: async (response) => {
      why = t("The server refused the message: {why}", { why: await refusal(response) });
    },
    failed: () => {
      why = t("The message was not sent: {why}", { why: unreached() });
    },
  });
  if (why === null || state.threadId !== threadId) return;
  if (!(await openThread(threadId, { history: "none" })) && state.threadId === threadId && !state.running) {
    showThread(threadId, stored);
    reloadWhenOnline(threadId);
  }
  setStatus(why);
}

// Open `threadId` again from the server once the browser is back online, if it is still the
// one shown and nothing runs: what a refused rerun showed from memory is replaced by the store's.
let reloadOnline = null; // the thread to reload, while a listener waits
function reloadWhenOnline(threadId) {
  if (reloadOnline === null) {
    window.addEventListener(
      "online",
      () => {
        const id = reloadOnline;
        reloadOnline = null;
        if (state.threadId === id && !state.running) openThread(id, { history: "none" });
      },
      { once: true },
    );
  }
  reloadOnline = threadId;
}

// A send the server never took: the message leaves the transcript, its text and files go
// back to the composer, and the notice offers Retry (which sends the composer's text again).
// The composer grows with what came back, so the notice is scrolled into view after it.
function sendFailed(run, userMessage, text, sent, why) {
  const index = state.transcript.indexOf(userMessage);
  if (index !== -1) state.transcript.splice(index, 1); // not sent twice
  composer.restorePending(sent);
  composer.restoreText(text);
  const note = run.turn.notice(why, true);
  note.classList.add("send-failed");
  const retry = el("button", "button small retry", t("Retry"));
  retry.type = "button";
  retry.addEventListener("click", () => {
    const userTurn = run.turn.el.previousElementSibling;
    if (userTurn && userTurn.classList.contains("user")) userTurn.remove();
    run.turn.el.remove();
    document.getElementById("composer").requestSubmit();
  });
  note.append(" ", retry);
  scrollDown(true);
  note.scrollIntoView({ block: "nearest" });
}

// Stop: ask the server to cancel the run and read on to its terminal event; abort the request
// when the server has no cancel route (404, 405) or the run does not end in time.
async function stop() {
  const run = state.running;
  if (!run || run.stopping) return;
  run.stopping = true;
  setStatus(t("Stopping…"), true);
  const answer = await transport.cancelRun(run.threadId, run.runId);
  if (state.running !== run) return; // it ended meanwhile
  if (answer === "accepted") {
    run.cancelTimer = setTimeout(() => run.controller.abort(), CANCEL_GRACE_MS);
  } else if (answer === "unsupported") {
    run.controller.abort(); // the server notices the closed connection and ends the run
  } else {
    run.stopping = false;
    setStatus(t("Could not stop the answer; try again."), true);
  }
}

// Stop following the current run: the page moves elsewhere. With `cancel`, the server is asked
// to cancel it too (New chat); without, a server that keeps runs going keeps it (Back).
function leaveRun({ cancel }) {
  const run = state.running;
  if (!run) return;
  run.detached = true;
  if (cancel) {
    transport.cancelRun(run.threadId, run.runId);
    liveRun.clear(run.runId);
  }
  run.controller.abort();
  state.running = null;
  setRunning(false);
}

// Reattach to a run of the open thread after a reload (or on coming back to the thread):
// `turn` is the stored turn the run goes on in, if the transcript ends with one.
async function resume(active, turn) {
  const run = beginRun(state.threadId, active.runId, turn || new AssistantTurn());
  run.resumable = true;
  setStatus(t("Reconnecting…"), true);
  let response;
  try {
    response = await transport.reattachRun(run.threadId, run.runId, 0, run.controller.signal);
  } catch {
    response = null;
  }
  if (!response || !response.ok) {
    // Gone, finished long ago, or a server without the route: show what is stored.
    liveRun.clear(run.runId);
    run.detached = true;
    if (state.running === run) {
      state.running = null;
      setRunning(false);
      setStatus("");
    }
    run.turn.settle();
    if (!turn) run.turn.el.remove(); // the empty turn made for the run
    return;
  }
  await follow(run, response, { replay: true });
}

// ---------------------------------------------------------------- navigation

// Open a stored thread. `history`: "push" (a new entry, the default), "replace" or "none"
// (the URL already names it: a reload, Back or Forward). Resolves to whether it was shown.
async function openThread(id, { history = "push" } = {}) {
  if (state.running) return false;
  let response;
  try {
    response = await transport.getThread(id);
  } catch (error) {
    setStatus(`Could not open the conversation: ${error.message}`);
    return false;
  }
  const remembered = liveRun.load();
  const rememberedHere = remembered && remembered.threadId === id ? remembered : null;
  // A thread this tab has a run for may not be stored yet: reattach to the run all the same.
  if (!response.ok && !(response.status === 404 && rememberedHere)) {
    setStatus(`Could not open the conversation: ${await errorText(response)}`);
    return false;
  }
  if (state.running) return false; // a run started while the thread loaded
  const payload = response.ok ? await response.json() : {};
  // The server's word on a run in progress; else the one this tab remembers for the thread.
  const active = activeRunOf(payload) || rememberedHere;
  const lastTurn = showThread(id, payload, { open: Boolean(active) });
  showUsage(id);
  if (history !== "none") showThreadInUrl(id, { replace: history === "replace" });
  drawer.markCurrent();
  if (drawer.isOpen()) {
    drawer.close();
    composer.focus();
  }
  if (active) await resume(active, lastTurn);
  return true;
}

// Show thread `id` from a thread payload ({messages, branches}): the conversation, its message
// buttons, an empty status line. `open`: its last turn goes on (a run to reattach to).
function showThread(id, payload, { open = false } = {}) {
  state.threadId = id;
  state.transcript = Array.isArray(payload.messages) ? payload.messages : [];
  const lastTurn = renderTranscript(state.transcript, { open });
  actions.show(payload);
  setStatus("");
  return lastTurn;
}

function newChat({ history = "push" } = {}) {
  if (state.running) leaveRun({ cancel: true });
  state.threadId = newId();
  state.transcript = [];
  clearLog();
  actions.show(null);
  setStatus("");
  showUsage(null);
  if (history !== "none") showThreadInUrl(null, { replace: history === "replace" });
  drawer.markCurrent();
  drawer.close();
  composer.focus();
}

// Back and Forward: open the thread the URL names (a run being followed goes on, unwatched).
onHistoryMove((id) => {
  if (state.running) leaveRun({ cancel: false });
  if (id) openThread(id, { history: "none" });
  else newChat({ history: "none" });
});

// A reload or a closed tab ends the request, not the run: the next page may reattach.
window.addEventListener("pagehide", () => {
  if (state.running) state.running.unloading = true;
});

composer.stopButton.addEventListener("click", stop);
// Escape stops a streaming answer from anywhere on the page, unless something nearer used it
// (an open dialog, the rename box, the drawer on a phone).
document.addEventListener("keydown", (event) => {
  if (event.key !== "Escape" || event.defaultPrevented || !state.running) return;
  if (document.querySelector("dialog[open]")) return;
  event.preventDefault();
  stop();
});
document.getElementById("new-chat").addEventListener("click", () => newChat());
document.querySelectorAll(".chip").forEach((chip) => {
  chip.addEventListener("click", () => send(chip.dataset.prompt));
});

composer.focus();
await drawer.load();
const linked = threadInUrl();
if (linked && state.threadsAvailable) await openThread(linked, { history: "none" });
