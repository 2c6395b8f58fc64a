// Operations on the messages of the open thread: edit a user message, regenerate an answer,
// switch between branches (‹ 2/3 ›) and fork a new thread from a message.
//
// The server owns the thread's tree (docs/agui.md, "Branches: edit, regenerate, fork"):
// - a regenerate posts the history cut at the user message before the answer, an edit the same
//   with that message's text changed; either starts a new branch there;
// - `branches` in GET threads/<id>/ names each message that has siblings, and PATCH
//   threads/<id>/ {"activeMessageId"} makes a sibling's branch the active one;
// - POST threads/<id>/fork/ {"messageId"} copies the branch up to a message into a new thread.
// - PUT threads/<id>/messages/<message_id>/feedback/ {"rating"} rates an answer (thumbs).
// The page offers only what its store does: the template says so in data-branches (edit,
// regenerate, branch navigation), data-forks (fork) and data-feedback (thumbs). Buttons are built with createElement
// and textContent; each has an aria-label.

import { assistantTurnOf, messageAttachments, renderUser } from "./render.js";
import { state } from "./state.js";
import { errorText } from "./transport.js";
import { el, t, textOf } from "./util.js";

// `rerun(transcript)` runs the agent on a cut transcript; `reopen()` renders the open thread
// again from the server; `openForked(id)` opens a new thread; `setStatus(text)` says what failed.
export function createMessageActions({ app, log, transport, rerun, reopen, openForked, setStatus }) {
  const branching = app.dataset.branches === "on";
  const forking = app.dataset.forks === "on";
  const rating = app.dataset.feedback === "on";
  const ratings = new Map(); // message id -> "up" | "down", of the open thread
  let branches = {}; // message id -> {siblings: [ids], index} of the open thread
  let lastShown = null; // the thread JSON show() was last given
  let positions = null; // message id -> index in state.transcript, while decorate() runs

  const indexOf = (id) =>
    positions ? (positions.get(id) ?? -1) : state.transcript.findIndex((message) => message.id === id);

  // The stored messages a turn shows, in order.
  function idsOf(turnEl) {
    let ids = [];
    if (turnEl.classList.contains("user")) ids = turnEl.dataset.messageId ? [turnEl.dataset.messageId] : [];
    else ids = [...(assistantTurnOf(turnEl)?.messages.keys() || [])];
    return ids.filter((id) => indexOf(id) !== -1);
  }

  // The id of the user message an answer replies to.
  function userBefore(id) {
    for (let index = indexOf(id); index >= 0; index -= 1) {
      if (state.transcript[index].role === "user") return state.transcript[index].id;
    }
    return null;
  }

  function button(text, label, onClick, className = "") {
    const node = el("button", `button ghost small op ${className}`.trim(), text);
    node.type = "button";
    node.setAttribute("aria-label", label);
    node.addEventListener("click", () => {
      if (!state.running) onClick(node);
    });
    return node;
  }

  // `‹ 2/3 ›` for a message with siblings; `key` is the id the active sibling has.
  function branchNav(key, point) {
    const count = point.siblings.length;
    const nav = el("span", "branch-nav op");
    nav.setAttribute("role", "group");
    nav.setAttribute("aria-label", t("Branches"));
    nav.dataset.branchKey = key;
    const previous = button("‹", t("Previous branch"), () => switchTo(point.siblings[point.index - 1], "previous"), "previous");
    const next = button("›", t("Next branch"), () => switchTo(point.siblings[point.index + 1], "next"), "next");
    previous.disabled = point.index <= 0;
    next.disabled = point.index >= count - 1;
    const where = el("span", "branch-count", `${point.index + 1}/${count}`);
    where.setAttribute("aria-label", t("Branch {index} of {count}", { index: point.index + 1, count }));
    nav.append(previous, where, next);
    return nav;
  }

  // Put the operations a turn's messages allow into its last row of message actions.
  function decorateTurn(turnEl) {
    turnEl.dataset.decorated = "";
    turnEl.querySelectorAll(".op, .turn-actions").forEach((node) => node.remove());
    const ids = idsOf(turnEl);
    if (!ids.length) return;
    const user = turnEl.classList.contains("user");
    const ops = [];
    const key = ids.find((id) => Object.hasOwn(branches, id));
    if (branching && key) ops.push(branchNav(key, branches[key]));
    if (branching && user) ops.push(button(t("Edit"), t("Edit message"), () => startEdit(turnEl, ids[0]), "edit"));
    const asked = !user && userBefore(ids[0]);
    if (branching && asked) ops.push(button(t("Regenerate"), t("Regenerate answer"), () => regenerate(turnEl, asked)));
    if (forking) ops.push(button(t("Fork"), t("Fork from this message"), () => fork(ids[ids.length - 1])));
    if (rating && !user) ops.push(...thumbs(ids[ids.length - 1]));
    if (!ops.length) return;
    let row = turnEl.lastElementChild;
    if (!row || !row.classList.contains("message-actions")) {
      row = el("div", "message-actions turn-actions");
      turnEl.append(row);
    }
    row.append(...ops);
  }

  // Give every turn its buttons (`fresh`: only turns that have none yet, such as the earlier
  // turns a long thread fills in).
  function decorate({ fresh = false } = {}) {
    positions = new Map(state.transcript.map((message, index) => [message.id, index]));
    try {
      for (const turnEl of log.querySelectorAll(fresh ? ".turn:not([data-decorated])" : ".turn")) decorateTurn(turnEl);
    } finally {
      positions = null;
    }
  }

  // The thread JSON of the open thread was rendered (null: a new chat). The buttons come
  // after the first paint, which stays within its frame (docs/benchmarks.md).
  function show(payload) {
    branches = payload && payload.branches && typeof payload.branches === "object" ? payload.branches : {};
    ratings.clear();
    for (const message of (payload && Array.isArray(payload.messages) && payload.messages) || []) {
      if (message && message.feedback && message.feedback.rating) ratings.set(message.id, message.feedback.rating);
    }
    const shown = payload;
    requestAnimationFrame(() =>
      setTimeout(() => {
        if (shown === lastShown) decorate({ fresh: true });
      }),
    );
    lastShown = shown;
  }

  // A run on the open thread ended: its messages are stored, and may have started a branch.
  async function afterRun(threadId) {
    if (branching) {
      try {
        const response = await transport.getThread(threadId);
        if (response.ok && state.threadId === threadId && !state.running) {
          const payload = await response.json();
          branches = payload.branches && typeof payload.branches === "object" ? payload.branches : {};
        }
      } catch {
        // offline: the buttons below stay as they were
      }
    }
    if (state.threadId === threadId && !state.running) decorate();
  }

  // Take `turnEl` and every turn after it off the page.
  function dropFrom(turnEl) {
    let node = turnEl;
    while (node) {
      const next = node.nextElementSibling;
      if (node.classList.contains("turn")) node.remove();
      node = next;
    }
  }

  async function regenerate(turnEl, userId) {
    const transcript = state.transcript.slice(0, indexOf(userId) + 1);
    dropFrom(turnEl);
    await rerun(transcript);
  }

  async function switchTo(id, direction) {
    const response = await transport.switchBranch(state.threadId, id).catch(() => null);
    if (!response || !response.ok) {
      const why = response ? await errorText(response) : t("You are offline: try again when the connection is back.");
      setStatus(t("Could not switch branches: {why}", { why }));
      return;
    }
    await reopen();
    decorate();
    // Keep the keyboard where it was: on the same arrow of the branch now shown.
    const nav = [...log.querySelectorAll(".branch-nav")].find((node) => node.dataset.branchKey === id);
    const target = nav && (nav.querySelector(`.${direction}:not(:disabled)`) || nav.querySelector("button:not(:disabled)"));
    if (target) target.focus();
  }

  // 👍 and 👎 for the answer whose last message is `messageId`: each a toggle (aria-pressed);
  // pressing the pressed one clears the rating.
  function thumbs(messageId) {
    const make = (value, symbol, label) => {
      const node = button(symbol, label, () => rate(messageId, ratings.get(messageId) === value ? null : value), `rate rate-${value}`);
      node.setAttribute("aria-pressed", String(ratings.get(messageId) === value));
      node.dataset.rating = value;
      return node;
    };
    return [make("up", "👍", t("Good answer")), make("down", "👎", t("Bad answer"))];
  }

  async function rate(messageId, value) {
    const response = await transport.rateMessage(state.threadId, messageId, value).catch(() => null);
    if (!response || !response.ok) {
      const why = response ? await errorText(response) : t("You are offline: try again when the connection is back.");
      setStatus(t("Could not save your feedback: {why}", { why }));
      return;
    }
    if (value) ratings.set(messageId, value);
    else ratings.delete(messageId);
    for (const node of log.querySelectorAll(".rate")) {
      const turnEl = node.closest(".turn");
      const ids = turnEl ? idsOf(turnEl) : [];
      if (ids[ids.length - 1] === messageId) node.setAttribute("aria-pressed", String(ratings.get(messageId) === node.dataset.rating));
    }
  }

  async function fork(messageId) {
    const response = await transport.forkThread(state.threadId, messageId).catch(() => null);
    if (!response || response.status !== 201) {
      const why = response ? await errorText(response) : t("You are offline: try again when the connection is back.");
      setStatus(t("Could not fork the conversation: {why}", { why }));
      return;
    }
    const { threadId } = await response.json();
    await openForked(threadId);
  }

  // Edit in place: a text box replaces the bubble; Save (or Enter) sends the new text as an
  // edit, Cancel (or Escape) puts the message back as it was.
  function startEdit(turnEl, id) {
    if (turnEl.querySelector(".edit-form")) return;
    const message = state.transcript[indexOf(id)];
    const original = textOf(message.content);
    const shown = [...turnEl.children];
    const form = el("form", "edit-form");
    const box = el("textarea", "edit-box");
    box.value = original;
    box.rows = Math.min(8, Math.max(2, original.split("\n").length));
    box.setAttribute("aria-label", t("Edit message"));
    const save = el("button", "button primary small", t("Save"));
    save.type = "submit";
    const cancel = el("button", "button ghost small", t("Cancel"));
    cancel.type = "button";
    const buttons = el("div", "edit-actions");
    buttons.append(cancel, save);
    form.append(box, buttons);
    for (const node of shown) node.hidden = true;
    turnEl.append(form);
    box.focus();

    const close = () => {
      form.remove();
      for (const node of shown) node.hidden = false;
      turnEl.querySelector("button.op.edit")?.focus();
    };
    cancel.addEventListener("click", close);
    box.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        close();
      } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = box.value;
      if (!text.trim() || state.running) return;
      const at = indexOf(id);
      const transcript = [...state.transcript.slice(0, at), { ...message, content: text }];
      dropFrom(turnEl);
      renderUser(text, messageAttachments(message), id);
      await rerun(transcript);
    });
  }

  // The branch points of the open thread, as the server last gave them.
  const branchPoints = () => branches;

  return { show, afterRun, decorate, branchPoints };
}
