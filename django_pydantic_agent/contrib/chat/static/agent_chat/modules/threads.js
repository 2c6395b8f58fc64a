// The thread drawer (when the server persists conversations): lists, opens, renames (PATCH) and
// deletes (DELETE) the user's threads; on narrow screens it is an overlay behind a toggle.

import { state } from "./state.js";
import { errorText } from "./transport.js";
import { askConfirm, el, icon, newId, PENCIL, sleep, t, TRASH } from "./util.js";

function threadItems(payload) {
  if (Array.isArray(payload)) return payload;
  for (const key of ["threads", "conversations", "items", "results"]) {
    if (payload && Array.isArray(payload[key])) return payload[key];
  }
  return [];
}

const itemId = (item) => item.threadId || item.id || item.thread_id;

// `onOpen(id)` opens a thread (the drawer's item was chosen); `onDeleted(id)` is told that the
// open thread was deleted.
export function createThreadDrawer({ app, transport, onOpen, onDeleted }) {
  const threadsPanel = document.getElementById("threads");
  const threadList = document.getElementById("thread-list");
  const threadError = document.getElementById("thread-error");
  const drawerToggle = document.getElementById("drawer-toggle");
  const drawerBackdrop = document.getElementById("drawer-backdrop");
  const narrowScreen = window.matchMedia("(max-width: 760px)");

  let threadsRequest = 0; // the latest drawer refresh; older answers are dropped
  let threadsStale = false; // a refresh was skipped while a title was being edited

  function showThreadError(text) {
    threadError.textContent = text;
    threadError.hidden = !text;
  }

  function markCurrent() {
    threadList.querySelectorAll(".thread-open").forEach((button) => {
      button.setAttribute("aria-current", String(button.dataset.threadId === state.threadId));
    });
  }

  function setAvailable(available) {
    state.threadsAvailable = available;
    threadsPanel.hidden = !available;
    drawerToggle.hidden = !available;
    app.classList.toggle("has-threads", available);
    if (!available) close();
  }

  // The item's own button for `id` (after a re-render the old node is gone).
  function threadButton(id, className) {
    return Array.from(threadList.querySelectorAll(`.${className}`)).find((b) => b.dataset.threadId === id);
  }

  function threadItem(item, index) {
    const id = itemId(item);
    const title = item.title || t("Untitled conversation");
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
    open.addEventListener("click", () => onOpen(id));

    const actions = el("div", "thread-actions");
    const rename = el("button", "icon-button thread-rename");
    rename.type = "button";
    rename.dataset.threadId = id;
    rename.title = t("Rename");
    rename.setAttribute("aria-label", `Rename “${title}”`);
    rename.append(icon(...PENCIL));
    rename.addEventListener("click", () => startRename(li, id, title));
    const remove = el("button", "icon-button thread-delete");
    remove.type = "button";
    remove.dataset.threadId = id;
    remove.title = t("Delete");
    remove.setAttribute("aria-label", `Delete “${title}”`);
    remove.append(icon(...TRASH));
    remove.addEventListener("click", () => deleteThread(id, title));
    actions.append(rename, remove);

    li.append(open, actions);
    return li;
  }

  async function load() {
    // An open title editor would be lost: refresh once it has closed.
    if (threadList.querySelector(".rename-form")) {
      threadsStale = true;
      return false;
    }
    const request = ++threadsRequest;
    let items;
    try {
      const response = await transport.listThreads(50);
      items = response.ok ? threadItems(await response.json()) : null;
    } catch {
      return false;
    }
    if (request !== threadsRequest) return false; // a newer refresh has the last word
    if (!items) {
      setAvailable(false);
      return false;
    }
    if (threadList.querySelector(".rename-form")) {
      threadsStale = true;
      return false;
    }
    setAvailable(true);
    threadsStale = false;
    const active = document.activeElement;
    const focusedId = threadList.contains(active) ? active.dataset.threadId : null;
    const focusedClass = ["thread-open", "thread-rename", "thread-delete"].find((name) => active.classList.contains(name));
    state.listedIds = items.map(itemId);
    threadList.replaceChildren();
    if (!items.length) {
      threadList.append(el("li", "none", t("No conversations yet.")));
    }
    items.forEach((item, index) => threadList.append(threadItem(item, index)));
    markCurrent();
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
    if (!state.threadsAvailable) return;
    if (outcome === "refused") {
      await load();
      return;
    }
    const delays = outcome === "finished" ? [0, 400, 1000] : [300, 700, 1500, 3000];
    for (const delay of delays) {
      if (delay) await sleep(delay);
      await load();
      if (state.listedIds.includes(id)) return;
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
    input.setAttribute("aria-label", t("New title"));
    const error = el("p", "rename-error");
    error.id = `rename-error-${newId()}`;
    error.setAttribute("role", "alert");
    error.hidden = true;
    input.setAttribute("aria-describedby", error.id);
    const save = el("button", "button primary small", t("Save"));
    save.type = "submit";
    const cancel = el("button", "button ghost small", t("Cancel"));
    cancel.type = "button";
    const buttons = el("div", "rename-buttons");
    buttons.append(save, cancel);
    form.append(input, buttons, error);
    li.classList.add("editing");
    li.append(form);
    input.focus();
    input.select();

    const finish = async (renamed) => {
      form.remove();
      li.classList.remove("editing");
      if (renamed || threadsStale) await load();
      const back = threadButton(id, "thread-rename");
      if (back) back.focus();
    };
    form.cancel = () => finish(false);
    cancel.addEventListener("click", () => finish(false));
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation(); // Escape cancels the edit, not the whole drawer
        finish(false);
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
        showError(t("Type a title, or press Cancel."));
        return;
      }
      save.disabled = true;
      try {
        const response = await transport.renameThread(id, input.value);
        if (response.ok) {
          await finish(true);
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
    if (state.running && id === state.threadId) {
      showThreadError(t("Stop the answer before deleting this conversation."));
      return;
    }
    if (!(await askConfirm(t("Delete “{title}”? This cannot be undone.", { title })))) return;
    const index = state.listedIds.indexOf(id);
    let response;
    try {
      response = await transport.deleteThread(id);
    } catch (caught) {
      showThreadError(`Could not delete “${title}”: ${caught.message}`);
      return;
    }
    if (!response.ok) {
      showThreadError(`Could not delete “${title}”: ${await errorText(response)}`);
      return;
    }
    const wasOpen = id === state.threadId;
    if (wasOpen) onDeleted(id);
    await load();
    if (!wasOpen) {
      // Keep the keyboard where it was: on the next conversation, else the previous one.
      const next = state.listedIds[Math.min(index, state.listedIds.length - 1)];
      const target = next ? threadButton(next, "thread-open") : document.getElementById("new-chat");
      if (target) target.focus();
    }
  }

  // ---------------------------------------------------------------- overlay (narrow screens)

  function isOpen() {
    return app.classList.contains("drawer-open");
  }

  function open() {
    app.classList.add("drawer-open");
    drawerToggle.setAttribute("aria-expanded", "true");
    drawerBackdrop.hidden = false;
    const current = threadList.querySelector('.thread-open[aria-current="true"]') || threadList.querySelector(".thread-open");
    (current || document.getElementById("reload-threads")).focus();
  }

  function close() {
    if (!isOpen()) return;
    app.classList.remove("drawer-open");
    drawerToggle.setAttribute("aria-expanded", "false");
    drawerBackdrop.hidden = true;
    if (threadsPanel.contains(document.activeElement)) drawerToggle.focus();
  }

  document.getElementById("reload-threads").addEventListener("click", () => {
    showThreadError("");
    load();
  });
  drawerToggle.addEventListener("click", () => (isOpen() ? close() : open()));
  drawerBackdrop.addEventListener("click", close);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && isOpen()) {
      close();
      drawerToggle.focus();
    }
  });
  narrowScreen.addEventListener("change", () => {
    if (!narrowScreen.matches) close();
  });

  return { load, refreshAfterRun, markCurrent, isOpen, close };
}
