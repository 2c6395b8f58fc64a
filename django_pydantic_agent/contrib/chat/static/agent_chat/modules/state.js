// The page's state, the thread in the URL, and the live run remembered across a reload.
//
// The open thread is `/?thread=<id>`: opening one from the drawer pushes a history entry, a new
// chat pushes the bare page, and Back/Forward (popstate) open what the URL names. A run that is
// streaming is remembered in sessionStorage (thread, run id, last sequence number seen), so a
// reload can reattach to it; the server's `active_run` of the thread says the same.

import { newId } from "./util.js";

export const state = {
  threadId: newId(),
  transcript: [], // AG-UI messages, posted with every run
  running: null, // the live run while one streams (see chat.js)
  threadsAvailable: false,
  listedIds: [], // the thread ids the drawer shows
};

// ------------------------------------------------------------------ router

export function threadInUrl() {
  const id = new URLSearchParams(window.location.search).get("thread");
  return id || null;
}

function urlFor(threadId) {
  const url = new URL(window.location.href);
  if (threadId) url.searchParams.set("thread", threadId);
  else url.searchParams.delete("thread");
  return `${url.pathname}${url.search}${url.hash}`;
}

// Show `threadId` (null: a new chat) in the address bar. `replace` rewrites the current entry
// (the first message of a new chat gives it its thread) instead of adding one.
export function showThreadInUrl(threadId, { replace = false } = {}) {
  if (threadInUrl() === (threadId || null)) return;
  const entry = { thread: threadId || null };
  if (replace) window.history.replaceState(entry, "", urlFor(threadId));
  else window.history.pushState(entry, "", urlFor(threadId));
}

// Call `open(threadId | null)` when Back or Forward lands on another entry.
export function onHistoryMove(open) {
  window.addEventListener("popstate", () => open(threadInUrl()));
}

// ------------------------------------------------------------------ the live run

const LIVE_RUN_KEY = "django-pydantic-agent.chat.live-run";

export const liveRun = {
  // {threadId, runId, lastSeq} of the run this tab was streaming, or null.
  load() {
    try {
      const value = JSON.parse(window.sessionStorage.getItem(LIVE_RUN_KEY) || "null");
      if (value && typeof value.threadId === "string" && typeof value.runId === "string") {
        return { threadId: value.threadId, runId: value.runId, lastSeq: Number(value.lastSeq) || 0 };
      }
    } catch {
      // unreadable or blocked storage: nothing remembered
    }
    return null;
  },

  save(threadId, runId, lastSeq) {
    try {
      window.sessionStorage.setItem(LIVE_RUN_KEY, JSON.stringify({ threadId, runId, lastSeq }));
    } catch {
      // storage full or blocked: the server's active_run still says where to reattach
    }
  },

  // Forget the remembered run (only `runId`'s, when given).
  clear(runId) {
    const current = this.load();
    if (runId && current && current.runId !== runId) return;
    try {
      window.sessionStorage.removeItem(LIVE_RUN_KEY);
    } catch {
      // nothing to forget
    }
  },
};

// The active run a thread payload names, as {runId, lastSeq}, or null. Read tolerantly: the
// key may be `active_run` or `activeRun`, the fields snake or camel case.
export function activeRunOf(payload) {
  const run = payload && (payload.active_run || payload.activeRun);
  if (!run || typeof run !== "object") return null;
  const runId = run.run_id || run.runId || run.id;
  if (typeof runId !== "string" || !runId) return null;
  const lastSeq = Number(run.last_seq ?? run.lastSeq ?? 0);
  return { runId, lastSeq: Number.isFinite(lastSeq) ? lastSeq : 0 };
}
