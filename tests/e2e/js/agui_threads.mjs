// Thread operations with the real @ag-ui/client HttpAgent and plain HTTP, as any AG-UI client
// would do them: two turns, a regenerate and an edit (the history posted cut at a point), a
// branch switch, a fork, a search, archive and unarchive, and both exports.
//
// Usage: node agui_threads.mjs <base-url>
// Environment: AGUI_COOKIE (the Cookie header of a logged-in session), AGUI_CSRF (its token).
// Prints one JSON document: what the server answered at each step.
import { HttpAgent } from "@ag-ui/client";
import { randomUUID } from "node:crypto";

const [base] = process.argv.slice(2);
if (!base) {
  console.error("usage: node agui_threads.mjs <base-url>");
  process.exit(2);
}

const headers = {};
if (process.env.AGUI_COOKIE) headers.Cookie = process.env.AGUI_COOKIE;
if (process.env.AGUI_CSRF) headers["X-CSRFToken"] = process.env.AGUI_CSRF;
const threadId = randomUUID();
const agent = new HttpAgent({ url: `${base}/agent/`, headers, threadId });
const report = { threadId, steps: {} };

async function call(method, path, body) {
  const response = await fetch(`${base}/agent/${path}`, {
    method,
    headers: { ...headers, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const type = response.headers.get("content-type") || "";
  const payload = type.includes("json") ? await response.json() : await response.text();
  return { status: response.status, body: payload };
}

async function run() {
  const { newMessages } = await agent.runAgent({ runId: randomUUID() });
  return newMessages;
}

// Only the fields an AG-UI message has: what a client keeps and posts back.
function plain(messages) {
  return messages.map(({ id, role, content, toolCalls, toolCallId }) =>
    Object.fromEntries(
      Object.entries({ id, role, content, toolCalls, toolCallId }).filter(([, v]) => v !== undefined),
    ),
  );
}

try {
  // Two turns.
  agent.addMessage({ id: "u1", role: "user", content: "Zebra sums: what is 2 + 3?" });
  await run();
  agent.addMessage({ id: "u2", role: "user", content: "And what is 6 * 7?" });
  const second = await run();
  const stored = await call("GET", `threads/${threadId}/`);
  report.steps.turns = { stored: stored.body.messages, answer: second.at(-1) };

  // Regenerate: the history as stored, cut after u2.
  const upToU2 = stored.body.messages.findIndex((m) => m.id === "u2") + 1;
  agent.setMessages(plain(stored.body.messages.slice(0, upToU2)));
  const regenerated = await run();
  const afterRegenerate = await call("GET", `threads/${threadId}/`);
  report.steps.regenerate = { answer: regenerated.at(-1), thread: afterRegenerate.body };

  // Switch back to the first answer, by one of the ids the thread route named.
  const points = Object.entries(afterRegenerate.body.branches);
  const [, point] = points.find(([, p]) => p.siblings.length === 2);
  const older = point.siblings[0];
  const switched = await call("PATCH", `threads/${threadId}/`, { activeMessageId: older });
  const afterSwitch = await call("GET", `threads/${threadId}/`);
  report.steps.switch = { older, status: switched.status, thread: afterSwitch.body };

  // Edit u1: the history cut at u1, its text changed.
  agent.setMessages([{ id: "u1", role: "user", content: "Zebra sums: what is 3 + 4?" }]);
  const edited = await run();
  const afterEdit = await call("GET", `threads/${threadId}/`);
  report.steps.edit = { answer: edited.at(-1), thread: afterEdit.body };

  // Fork from the edited answer.
  const answerId = afterEdit.body.messages.at(-1).id;
  const forked = await call("POST", `threads/${threadId}/fork/`, { messageId: answerId });
  const fork = await call("GET", `threads/${forked.body.threadId}/`);
  report.steps.fork = { status: forked.status, threadId: forked.body.threadId, thread: fork.body };

  // Search, archive (hidden from the list, listed with ?archived=1), unarchive.
  const found = await call("GET", "threads/?q=zebra");
  const archived = await call("PATCH", `threads/${threadId}/`, { archived: true });
  const listed = await call("GET", "threads/");
  const listedArchived = await call("GET", "threads/?archived=1");
  const unarchived = await call("PATCH", `threads/${threadId}/`, { archived: false });
  const relisted = await call("GET", "threads/");
  const ids = (page) => page.body.threads.map((t) => t.threadId);
  report.steps.drawer = {
    found: found.body.threads,
    archived: archived.status,
    listed: ids(listed),
    listedArchived: ids(listedArchived),
    unarchived: unarchived.status,
    relisted: ids(relisted),
  };

  // Both exports.
  const json = await call("GET", `threads/${threadId}/export/?format=json`);
  const markdown = await call("GET", `threads/${threadId}/export/?format=markdown`);
  report.steps.export = { json: json.body, markdown: markdown.body, status: [json.status, markdown.status] };
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
}

process.stdout.write(JSON.stringify(report));
