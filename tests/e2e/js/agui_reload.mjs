// A page reloaded while its worker dies, with the real @ag-ui/client.
//
// Usage: node agui_reload.mjs <mount-1> <mount-2> <thread-id> <run-id> [<prompt>]
//   <mount-1>, <mount-2>  the AG-UI mount on each worker, with its trailing slash
// Environment: AGUI_COOKIE (the Cookie header of a logged-in session, valid on both workers),
// AGUI_CSRF (its token), AGUI_AFTER_DELTAS (answer deltas the client reads before it says it
// is ready; default 10).
//
// 1. HttpAgent posts the run to worker 1 and reads its stream. After AGUI_AFTER_DELTAS deltas
//    of the answer (after the tool's result) it prints `READY` on a line of its own and goes on
//    reading; the caller kills worker 1 and writes a line to stdin.
// 2. The page "reloads" on worker 2 at once: GET threads/<thread>/ (its messages and
//    activeRun), then a fresh client starting from those messages reattaches with the last id
//    the first client saw (a page keeps it across the reload), through connectAgent(): the
//    package's own SSE parser, verifier and message reducer (defaultApplyEvents) read it.
//    Alongside, the first client's own messages reattach the same way (a page that only lost
//    its connection).
// 3. Once the run has ended: GET threads/<thread>/ again, what the thread stores.
//
// Prints one JSON document on the last line.
import { HttpAgent } from "@ag-ui/client";
import { createInterface } from "node:readline";
import { ReattachingAgent, recordingFetch } from "./reattach.mjs";

const [mountOne, mountTwo, threadId, runId, prompt = "Tell me a long story, please."] = process.argv.slice(2);
if (!mountOne || !mountTwo || !threadId || !runId) {
  console.error("usage: node agui_reload.mjs <mount-1> <mount-2> <thread-id> <run-id> [<prompt>]");
  process.exit(2);
}
const AFTER_DELTAS = Number(process.env.AGUI_AFTER_DELTAS || 10);

// @ag-ui/client 1.0.0 leaves one rejection of a request whose connection broke unhandled
// besides rejecting runAgent() (a page logs it): kept for the report, not fatal.
const unhandled = [];
process.on("unhandledRejection", (error) => unhandled.push(String(error?.message ?? error)));

const headers = {};
if (process.env.AGUI_COOKIE) headers.Cookie = process.env.AGUI_COOKIE;
if (process.env.AGUI_CSRF) headers["X-CSRFToken"] = process.env.AGUI_CSRF;

async function settle(promise) {
  try {
    return { value: await promise, error: null };
  } catch (error) {
    return { value: null, error: { message: String(error?.message ?? error), status: error?.status ?? null } };
  }
}

async function thread(mount) {
  const response = await fetch(new URL(`threads/${encodeURIComponent(threadId)}/`, mount), { headers });
  return { status: response.status, body: response.ok ? await response.json() : await response.text() };
}

// The AG-UI message a page builds from a stored one (the thread route adds status and
// bookkeeping, which a client does not keep).
function wire(message) {
  const kept = { id: message.id, role: message.role };
  for (const key of ["content", "toolCalls", "toolCallId", "name"]) {
    if (message[key] !== undefined && message[key] !== null) kept[key] = message[key];
  }
  return kept;
}

const lastId = (frames, count) =>
  Math.max(...frames.slice(0, count).filter((f) => f.id).map((f) => Number(f.id.slice(f.id.lastIndexOf(":") + 1))));

// 1. The first page, on worker 1.
const firstFrames = [];
const first = new HttpAgent({ url: mountOne, headers, threadId, fetch: recordingFetch(firstFrames) });
first.addMessage({ id: `${runId}-user`, role: "user", content: prompt });
const firstEvents = [];
let answerDeltas = 0;
let answering = false;
let ready;
const isReady = new Promise((resolve) => {
  ready = resolve;
});
const running = settle(
  first.runAgent(
    { runId },
    {
      onEvent: ({ event }) => {
        firstEvents.push(event);
        if (event.type === "TOOL_CALL_RESULT") answering = true;
        if (answering && event.type === "TEXT_MESSAGE_CONTENT" && ++answerDeltas === AFTER_DELTAS) ready();
      },
    },
  ),
);
await Promise.race([isReady, running]);
const killed = new Promise((resolve) => createInterface({ input: process.stdin }).once("line", resolve));
process.stdout.write("READY\n");
await killed;
const firstResult = await running;
await firstFrames.done();
const seen = lastId(firstFrames, firstEvents.length);

// 2. The reload (and the reconnect), on worker 2.
async function reattach(messages) {
  const frames = [];
  const events = [];
  const client = new ReattachingAgent(
    { url: mountTwo, headers, threadId, initialMessages: messages, fetch: recordingFetch(frames) },
    { runId, after: seen },
  );
  const result = await settle(client.connectAgent({ runId }, { onEvent: ({ event }) => events.push(event) }));
  await frames.done();
  return { statuses: frames.statuses, frames: [...frames], types: events.map((e) => e.type), messages: client.messages, error: result.error };
}
const reloaded = await thread(mountTwo);
const [reload, reconnect] = await Promise.all([
  reattach(reloaded.status === 200 ? reloaded.body.messages.map(wire) : []),
  reattach(first.messages),
]);

// 3. The thread as stored, once the run has ended.
let stored = await thread(mountTwo);
for (let tries = 0; stored.status === 200 && stored.body.activeRun && tries < 300; tries++) {
  await new Promise((resolve) => setTimeout(resolve, 100));
  stored = await thread(mountTwo);
}

process.stdout.write(
  JSON.stringify({
    first: { frames: firstFrames.slice(0, firstEvents.length), types: firstEvents.map((e) => e.type), seen, error: firstResult.error },
    reloadedThread: { status: reloaded.status, activeRun: reloaded.status === 200 ? reloaded.body.activeRun : null },
    reload,
    reconnect,
    stored: stored.body,
    unhandled,
  }) + "\n",
);
