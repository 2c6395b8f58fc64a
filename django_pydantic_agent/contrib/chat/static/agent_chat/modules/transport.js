// Everything the page says to the AG-UI server: runs, their event streams, threads and uploads
// (the drawer's list, search, archive and export requests are in drawer_api.js).
//
// A run is one POST of a RunAgentInput whose response body is a server-sent event stream. The
// body is read with fetch and cut into frames at blank lines; comment lines (the server's
// ": ping" heartbeats) are skipped, `data:` lines carry the event and an `id:` line, when the
// server sends one, is `<run_id>:<seq>`: the position to reattach from. A reattach is a GET of
// `runs/<thread>/<run>/?after=<seq>`, a cancel a POST to `runs/<thread>/<run>/cancel/`. Every
// request that changes something carries the CSRF token as X-CSRFToken.

// What a failed request says: the server's JSON `error`, else its status line.
export async function errorText(response) {
  try {
    const body = await response.json();
    if (body && typeof body.error === "string") return body.error;
  } catch {
    // not JSON: fall through to the status line
  }
  return `${response.status} ${response.statusText}`.trim();
}

// `<run_id>:<seq>` as {runId, seq}; null for anything else. The run id may hold colons.
export function parseEventId(id) {
  if (typeof id !== "string") return null;
  const at = id.lastIndexOf(":");
  if (at <= 0) return null;
  const seq = Number(id.slice(at + 1));
  if (!Number.isInteger(seq) || seq < 0) return null;
  return { runId: id.slice(0, at), seq };
}

// Yield {event, id} for each SSE frame of the body: the JSON of its `data:` lines and the
// value of its `id:` line (null without one). Frames end at a blank line; CR LF is accepted.
export async function* sseFrames(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) !== -1) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = [];
        let id = null;
        for (const line of frame.split("\n")) {
          if (line.startsWith(":")) continue; // a comment: the server's heartbeat
          if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
          else if (line.startsWith("id:")) id = line.slice(3).replace(/^ /, "");
        }
        if (data.length) yield { event: JSON.parse(data.join("\n")), id };
      }
    }
  } finally {
    reader.cancel().catch(() => {}); // a reader that stops early closes the connection
  }
}

export function createTransport({ agentUrl, csrfToken, uploadUrl }) {
  const json = { Accept: "application/json" };
  const csrf = { "X-CSRFToken": csrfToken };
  const threadUrl = (id) => `${agentUrl}threads/${encodeURIComponent(id)}/`;
  const runUrl = (threadId, runId) =>
    `${agentUrl}runs/${encodeURIComponent(threadId)}/${encodeURIComponent(runId)}/`;
  const send = (url, init = {}) => fetch(url, { credentials: "same-origin", ...init });

  return {
    agentUrl,
    uploadUrl,

    attachmentUrl(id) {
      return `${uploadUrl || `${agentUrl}attachments/`}${encodeURIComponent(id)}/`;
    },

    // POST a RunAgentInput; the response body is the run's event stream.
    startRun(body, signal) {
      return send(agentUrl, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream", ...csrf },
        body: JSON.stringify(body),
        signal,
      });
    },

    // GET the events of a run after `after` (0: from its start), then its live tail.
    reattachRun(threadId, runId, after, signal) {
      const query = new URLSearchParams({ after: String(after || 0) });
      return send(`${runUrl(threadId, runId)}?${query}`, { headers: { Accept: "text/event-stream" }, signal });
    },

    // Ask the server to cancel a run. Resolves to "accepted" (the stream will end with
    // RUN_FINISHED outcome cancelled), "unsupported" (404 or 405: a server without the route,
    // so the caller aborts the request instead) or "failed" (any other answer, or none).
    async cancelRun(threadId, runId) {
      let response;
      try {
        response = await send(`${runUrl(threadId, runId)}cancel/`, { method: "POST", headers: { ...json, ...csrf } });
      } catch {
        return "failed";
      }
      if (response.ok) return "accepted";
      return response.status === 404 || response.status === 405 ? "unsupported" : "failed";
    },

    getThread(id) {
      return send(threadUrl(id), { headers: json });
    },

    // The caller's usage and budgets, with one thread's totals (404: the route is not mounted).
    getUsage(threadId) {
      const query = new URLSearchParams({ thread: threadId, days: "1" });
      return send(`${agentUrl}usage/?${query}`, { headers: json });
    },

    renameThread(id, title) {
      return send(threadUrl(id), {
        method: "PATCH",
        headers: { "Content-Type": "application/json", ...json, ...csrf },
        body: JSON.stringify({ title }),
      });
    },

    // Make the branch through message `messageId` the thread's active one (409: a run streams).
    switchBranch(id, messageId) {
      return send(threadUrl(id), {
        method: "PATCH",
        headers: { "Content-Type": "application/json", ...json, ...csrf },
        body: JSON.stringify({ activeMessageId: messageId }),
      });
    },

    // Rate message `messageId` of thread `id`: rating "up", "down" or null (clears it).
    rateMessage(id, messageId, rating) {
      return send(`${threadUrl(id)}messages/${encodeURIComponent(messageId)}/feedback/`, {
        method: "PUT",
        headers: { "Content-Type": "application/json", ...json, ...csrf },
        body: JSON.stringify({ rating }),
      });
    },

    // A new thread holding the active branch up to and including `messageId`: 201 {threadId}.
    forkThread(id, messageId) {
      return send(`${threadUrl(id)}fork/`, {
        method: "POST",
        headers: { "Content-Type": "application/json", ...json, ...csrf },
        body: JSON.stringify({ messageId }),
      });
    },

    deleteThread(id) {
      return send(threadUrl(id), { method: "DELETE", headers: csrf });
    },

    upload(file) {
      const data = new FormData();
      data.append("file", file);
      return send(uploadUrl, { method: "POST", headers: { ...csrf, ...json }, body: data });
    },

    deleteAttachment(id) {
      return send(this.attachmentUrl(id), { method: "DELETE", headers: csrf });
    },
  };
}
