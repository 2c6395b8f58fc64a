// Run two turns against the example project with the real @ag-ui/client HttpAgent.
//
// Usage: node agui_client.mjs <endpoint-url> <prompt> [<prompt> ...]
// Environment: AGUI_COOKIE (the Cookie header of a logged-in session), AGUI_CSRF (its token).
// Prints one JSON document: for every turn, the event types seen, the run's newMessages and
// the error if it failed; then the agent's whole transcript.
import { HttpAgent } from "@ag-ui/client";
import { randomUUID } from "node:crypto";

const [url, ...prompts] = process.argv.slice(2);
if (!url || prompts.length === 0) {
  console.error("usage: node agui_client.mjs <endpoint-url> <prompt> [<prompt> ...]");
  process.exit(2);
}

const headers = {};
if (process.env.AGUI_COOKIE) headers.Cookie = process.env.AGUI_COOKIE;
if (process.env.AGUI_CSRF) headers["X-CSRFToken"] = process.env.AGUI_CSRF;

const agent = new HttpAgent({ url, headers, threadId: randomUUID() });
const turns = [];
for (const prompt of prompts) {
  agent.addMessage({ id: randomUUID(), role: "user", content: prompt });
  const events = [];
  const turn = { prompt, events, newMessages: [], error: null };
  try {
    const { newMessages } = await agent.runAgent(
      { runId: randomUUID() },
      { onEvent: ({ event }) => { events.push(event); } },
    );
    turn.newMessages = newMessages;
  } catch (error) {
    turn.error = String(error && error.message ? error.message : error);
  }
  turns.push(turn);
}

process.stdout.write(JSON.stringify({ threadId: agent.threadId, turns, messages: agent.messages }));
