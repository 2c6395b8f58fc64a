// What the Node clients share to read a run the way a page does: a fetch that records each SSE
// frame's `id:` (the client itself ignores ids), and an HttpAgent whose connectAgent()
// reattaches to a run, so @ag-ui/client's own SSE parser, verifier and message reducer
// (defaultApplyEvents) read the reattached stream.
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";

// `{ id, type }` of one SSE frame, or null for a comment (a ": ping" heartbeat).
function parseFrame(frame) {
  let id = null;
  const data = [];
  for (const line of frame.split("\n")) {
    if (line.startsWith("id:")) id = line.slice(3).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (data.length === 0) return null;
  return { id, type: JSON.parse(data.join("\n")).type };
}

async function collect(body, frames) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = parseFrame(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (frame) frames.push(frame);
      }
    }
  } catch {
    // The request was aborted or its server died: the frames read so far are what it got.
  }
}

// A fetch for HttpAgent that records the frames of every streamed answer in `frames` and the
// status of every answer in `frames.statuses`; `frames.done()` resolves once the last one is
// read to its end (or broken off).
export function recordingFetch(frames) {
  const reading = [];
  frames.done = () => Promise.all(reading);
  frames.statuses = [];
  return async (url, init) => {
    const response = await fetch(url, init);
    frames.statuses.push(response.status);
    if (!response.ok || !response.body) return response;
    const [mine, theirs] = response.body.tee();
    reading.push(collect(mine, frames));
    return new Response(theirs, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}

// HttpAgent whose `connect` (what connectAgent() runs through the client's verifier and message
// reducer) reattaches to a run of the mount at `config.url`: GET runs/<thread>/<run>/ with
// ?after=<seq> or Last-Event-ID.
export class ReattachingAgent extends HttpAgent {
  constructor(config, target) {
    super(config);
    this.target = target;
  }

  connect(input) {
    const { runId, after, lastEventId } = this.target;
    const url = new URL(`runs/${encodeURIComponent(input.threadId)}/${encodeURIComponent(runId)}/`, this.url);
    if (after !== undefined) url.searchParams.set("after", String(after));
    const requestHeaders = { ...this.headers, Accept: "text/event-stream" };
    if (lastEventId !== undefined) requestHeaders["Last-Event-ID"] = lastEventId;
    return transformHttpEventStream(runHttpRequest(() => this.fetch(url.href, { method: "GET", headers: requestHeaders })));
  }
}
