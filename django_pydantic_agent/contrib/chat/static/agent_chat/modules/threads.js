// The thread drawer (when the server persists conversations): lists, opens, renames (PATCH),
// archives and deletes (DELETE) the user's threads, searches them (with a marked snippet per
// match), shows the archived ones behind a toggle, and pages through them all (nextCursor: a
// "More" button, pressed by itself when it scrolls into view). On narrow screens it is an
// overlay behind a toggle.

import { createDrawerApi } from "./drawer_api.js";
import { createExport } from "./export.js";
import { markedSnippet, searchTerms } from "./search.js";
import { state } from "./state.js";
import { errorText } from "./transport.js";
import { askConfirm, el, icon, newId, PENCIL, sleep, t, TRASH } from "./util.js";

//: Threads asked for per page.
const PAGE_SIZE = 50;
//: How long the search box waits for more typing before it asks the server.
const SEARCH_DELAY_MS = 250;
const ARCHIVE = ["M3 4h18v4H3z", "M5 8v12h14V8", "M10 12h4"];
const UNARCHIVE = ["M3 4h18v4H3z", "M5 8v12h14V8", "M12 18v-6", "M9.5 14.5 12 12l2.5 2.5"];
const PIN = ["M9 3h6l-1 6 4 4H6l4-4z", "M12 13v8"];

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
  const searchBox = document.getElementById("thread-search");
  const archivedToggle = document.getElementById("show-archived");
  const moreButton = document.getElementById("more-threads");
  const announcer = document.getElementById("thread-announce");
  const narrowScreen = window.matchMedia("(max-width: 760px)");
  const api = createDrawerApi({ agentUrl: transport.agentUrl, csrfToken: app.dataset.csrfToken });
  const exporter = createExport({ api, state });

  let threadsRequest = 0; // the latest drawer refresh; older answers are dropped
  let threadsStale = false; // a refresh was skipped while a title was being edited
  let nextCursor = null; // where the next page starts; null: every page is shown
  let loadingMore = false;
  // The store keeps an archived flag unless the page was told otherwise (or the server says so).
  let canArchive = app.dataset.threadArchive !== "0";
  const view = { q: "", archived: false, tag: "" }; // what the list shows
  // The store keeps pins and tags (data-thread-tags): a pin button, and tags that filter.
  const canTag = app.dataset.threadTags === "1";

  function showThreadError(text) {
    threadError.textContent = text;
    threadError.hidden = !text;
  }

  // Say a change of the list to screen readers (the polite live region under the heading).
  function announce(text) {
    if (!announcer) return;
    announcer.textContent = "";
    announcer.textContent = text;
  }

  function markCurrent() {
    threadList.querySelectorAll(".thread-open").forEach((button) => {
      button.setAttribute("aria-current", String(button.dataset.threadId === state.threadId));
    });
    exporter.update();
  }

  function setAvailable(available) {
    state.threadsAvailable = available;
    threadsPanel.hidden = !available;
    drawerToggle.hidden = !available;
    app.classList.toggle("has-threads", available);
    if (!available) close();
    exporter.update();
  }

  function setCanArchive(value) {
    canArchive = value;
    if (archivedToggle) archivedToggle.hidden = !value;
    threadList.querySelectorAll(".thread-archive").forEach((button) => {
      button.hidden = !value;
    });
  }

  // The item's own button for `id` (after a re-render the old node is gone).
  function threadButton(id, className) {
    return Array.from(threadList.querySelectorAll(`.${className}`)).find((b) => b.dataset.threadId === id);
  }

  function actionButton(className, label, paths, id, onClick) {
    const button = el("button", `icon-button ${className}`);
    button.type = "button";
    button.dataset.threadId = id;
    button.title = label;
    button.append(icon(...paths));
    button.addEventListener("click", onClick);
    return button;
  }

  function threadItem(item, terms) {
    const id = itemId(item);
    const title = item.title || t("Untitled conversation");
    const li = el("li", "thread");
    li.dataset.threadId = id;

    // The title may be cut to fit: the tooltip has all of it; the preview (in a search: the
    // snippet, its matching words marked) is a second line.
    const open = el("button", "thread-open");
    open.type = "button";
    open.dataset.threadId = id;
    open.title = title;
    const titleLine = el("span", "thread-title");
    if (terms.length) titleLine.append(markedSnippet(title, terms));
    else titleLine.textContent = title;
    open.append(titleLine);
    // A snippet that only repeats the title (a title match) gives way to the preview.
    const snippet = terms.length && item.snippet && item.snippet !== title ? item.snippet : null;
    const second = snippet || item.preview;
    if (second) {
      const line = el("span", snippet ? "thread-preview thread-snippet" : "thread-preview");
      if (terms.length) line.append(markedSnippet(second, terms));
      else line.textContent = second;
      line.id = `thread-preview-${newId()}`;
      line.setAttribute("aria-hidden", "true");
      open.append(line);
      open.setAttribute("aria-describedby", line.id);
    }
    open.addEventListener("click", () => onOpen(id));
    if (item.pinned) li.classList.add("pinned");
    const tags = Array.isArray(item.tags) ? item.tags.filter((tag) => typeof tag === "string") : [];
    const tagRow = tags.length ? el("div", "thread-tags") : null;
    for (const tag of tags) {
      const chip = el("button", "thread-tag", tag);
      chip.type = "button";
      chip.setAttribute("aria-pressed", String(view.tag === tag));
      chip.setAttribute("aria-label", t("Show the conversations tagged “{tag}”", { tag }));
      chip.addEventListener("click", () => {
        view.tag = view.tag === tag ? "" : tag;
        load({ announced: true });
      });
      tagRow.append(chip);
    }

    const actions = el("div", "thread-actions");
    const rename = actionButton("thread-rename", t("Rename"), PENCIL, id, () => startRename(li, id, title));
    rename.setAttribute("aria-label", `${t("Rename")} “${title}”`);
    const archived = Boolean(item.archived);
    const archiveLabel = archived ? t("Unarchive") : t("Archive");
    const archive = actionButton("thread-archive", archiveLabel, archived ? UNARCHIVE : ARCHIVE, id, () =>
      setArchived(id, title, !archived),
    );
    archive.setAttribute("aria-label", `${archiveLabel} “${title}”`);
    archive.hidden = !canArchive;
    const remove = actionButton("thread-delete", t("Delete"), TRASH, id, () => deleteThread(id, title));
    remove.setAttribute("aria-label", `${t("Delete")} “${title}”`);
    actions.append(rename, archive, remove);

    // The pin stands before the title (shown while pinned, else on hover and focus), so the
    // buttons laid over the title's end stay clear of its middle.
    if (canTag) {
      const pinLabel = item.pinned ? t("Unpin") : t("Pin");
      const pin = actionButton("thread-pin", pinLabel, PIN, id, () => setPinned(id, title, !item.pinned));
      pin.setAttribute("aria-label", `${pinLabel} “${title}”`);
      pin.setAttribute("aria-pressed", String(Boolean(item.pinned)));
      li.append(pin);
    }
    li.append(open, actions);
    if (tagRow) li.append(tagRow);
    return li;
  }

  function emptyText() {
    if (view.q) return t("No conversations match “{query}”.", { query: view.q });
    if (view.tag) return t("No conversations tagged “{tag}”.", { tag: view.tag });
    if (view.archived) return t("No archived conversations.");
    return t("No conversations yet.");
  }

  // What the list now shows, in a sentence (said when the person changed the view).
  function summary(count) {
    if (!count) return emptyText();
    const more = nextCursor ? ` ${t("Scroll for more.")}` : "";
    if (view.q) return `${t("Matches for “{query}”: {count}.", { count, query: view.q })}${more}`;
    if (view.tag) return `${t("Tagged “{tag}”: {count}.", { count, tag: view.tag })}${more}`;
    if (view.archived) return `${t("Archived conversations: {count}.", { count })}${more}`;
    return `${t("Conversations: {count}.", { count })}${more}`;
  }

  function showMore(cursor) {
    nextCursor = cursor || null;
    moreButton.hidden = !nextCursor;
    // Observing again reports where the button is now: a page that leaves it in view loads
    // the next one without a scroll.
    if (nextCursor && observer) {
      observer.unobserve(moreButton);
      observer.observe(moreButton);
    }
  }

  async function fetchPage(cursor) {
    const response = await api.listPage({ limit: PAGE_SIZE, q: view.q, archived: view.archived, tag: view.tag, cursor });
    if (!response.ok) return { response, items: null, cursor: null };
    const payload = await response.json();
    return { response, items: threadItems(payload), cursor: payload && payload.nextCursor };
  }

  // The first page of the current view, replacing the list. `announced`: say what it shows.
  async function load({ announced = false } = {}) {
    // An open title editor would be lost: refresh once it has closed.
    if (threadList.querySelector(".rename-form")) {
      threadsStale = true;
      return false;
    }
    const request = ++threadsRequest;
    const filtered = Boolean(view.q || view.archived || view.tag);
    // A refresh (after a run, a rename) shows as many threads as before, where they were.
    const shown = announced ? 0 : state.listedIds.length;
    const scrolled = threadsPanel.scrollTop;
    let page;
    try {
      page = await fetchPage(null);
    } catch {
      return false;
    }
    if (request !== threadsRequest) return false; // a newer refresh has the last word
    if (!page.items) {
      // A search the server refused says why; an unfiltered list it refuses means no drawer.
      if (filtered && state.threadsAvailable) showThreadError(await errorText(page.response));
      else setAvailable(false);
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
    const focusedClass = ["thread-open", "thread-rename", "thread-archive", "thread-delete"].find((name) =>
      active.classList.contains(name),
    );
    const terms = view.q ? searchTerms(view.q) : [];
    state.listedIds = page.items.map(itemId);
    threadList.replaceChildren();
    if (!page.items.length) threadList.append(el("li", "none", emptyText()));
    page.items.forEach((item) => threadList.append(threadItem(item, terms)));
    showMore(page.cursor);
    while (nextCursor && state.listedIds.length < shown && request === threadsRequest) {
      if (!(await loadMore({ quiet: true }))) break;
    }
    threadsPanel.scrollTop = announced ? 0 : scrolled;
    markCurrent();
    if (announced) announce(summary(page.items.length));
    // A refresh must not throw keyboard focus back to the top of the page.
    if (focusedId && focusedClass) {
      const again = threadButton(focusedId, focusedClass);
      if (again) again.focus();
    }
    return true;
  }

  // The next page, after the ones shown; false when none was added. `quiet`: say nothing.
  async function loadMore({ quiet = false } = {}) {
    if (!nextCursor || loadingMore) return false;
    loadingMore = true;
    const request = threadsRequest;
    const byKeyboard = document.activeElement === moreButton;
    moreButton.disabled = true;
    let page;
    try {
      page = await fetchPage(nextCursor);
    } catch (caught) {
      page = { items: null, error: caught.message };
    } finally {
      loadingMore = false;
      moreButton.disabled = false;
    }
    if (request !== threadsRequest) return false; // the list was refreshed meanwhile
    if (!page.items) {
      showThreadError(page.error || (await errorText(page.response)));
      return false;
    }
    const terms = view.q ? searchTerms(view.q) : [];
    const fresh = page.items.filter((item) => !state.listedIds.includes(itemId(item)));
    state.listedIds.push(...fresh.map(itemId));
    const nodes = fresh.map((item) => threadItem(item, terms));
    threadList.append(...nodes);
    markCurrent();
    showMore(page.cursor);
    if (!quiet) announce(t("More conversations shown: {count}.", { count: nodes.length }));
    if (byKeyboard && nodes.length) nodes[0].querySelector(".thread-open").focus();
    return nodes.length > 0;
  }

  // Refresh the drawer once a run has ended. A finished run is saved by the time its stream
  // ends; a stopped (or broken) one only once the server has noticed the disconnect, normally
  // within milliseconds: look again a few times until the thread is listed.
  async function refreshAfterRun(id, outcome) {
    if (!state.threadsAvailable) return;
    if (outcome === "refused" || view.q || view.archived || view.tag) {
      await load(); // a search or the archived list need not show the thread at all
      return;
    }
    const delays = outcome === "finished" ? [0, 400, 1000] : [300, 700, 1500, 3000];
    for (const delay of delays) {
      if (delay) await sleep(delay);
      await load();
      if (state.listedIds.includes(id)) return;
    }
  }

  // Pin (or unpin) a thread: pinned threads lead the list, so it is loaded again.
  async function setPinned(id, title, pinned) {
    showThreadError("");
    const response = await api.setLabels(id, { pinned }).catch(() => null);
    if (!response || !response.ok) {
      const why = response ? await errorText(response) : t("You are offline: try again when the connection is back.");
      showThreadError(`${t("Could not pin “{title}”:", { title })} ${why}`);
      return;
    }
    announce(pinned ? t("“{title}” pinned.", { title }) : t("“{title}” unpinned.", { title }));
    await load();
    const target = threadButton(id, "thread-pin");
    if (target) target.focus();
  }

  // Archive (or bring back) a thread: it leaves the list shown; the keyboard moves to the next.
  async function setArchived(id, title, archived) {
    showThreadError("");
    const index = state.listedIds.indexOf(id);
    let response;
    try {
      response = await api.setArchived(id, archived);
    } catch (caught) {
      showThreadError(`${t("Could not archive “{title}”:", { title })} ${caught.message}`);
      return;
    }
    if (!response.ok) {
      const why = await errorText(response);
      showThreadError(`${t("Could not archive “{title}”:", { title })} ${why}`);
      if (response.status === 400 && /cannot archive/.test(why)) setCanArchive(false);
      return;
    }
    await load();
    announce(archived ? t("“{title}” archived.", { title }) : t("“{title}” is back in your conversations.", { title }));
    const next = state.listedIds[Math.min(index, state.listedIds.length - 1)];
    const target = next ? threadButton(next, "thread-open") : archivedToggle;
    if (target) target.focus();
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
    load({ announced: true });
  });

  // Search: ask once typing pauses; Escape empties the box (and goes no further).
  let searchTimer = null;
  searchBox.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      const q = searchBox.value.trim();
      if (q === view.q) return;
      view.q = q;
      showThreadError("");
      load({ announced: true });
    }, SEARCH_DELAY_MS);
  });
  searchBox.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && searchBox.value) {
      event.preventDefault();
      event.stopPropagation();
      searchBox.value = "";
      searchBox.dispatchEvent(new Event("input"));
    }
  });

  // The archived conversations instead of the others (a toggle button).
  archivedToggle.addEventListener("click", () => {
    view.archived = !view.archived;
    archivedToggle.setAttribute("aria-pressed", String(view.archived));
    threadsPanel.classList.toggle("showing-archived", view.archived);
    showThreadError("");
    load({ announced: true });
  });
  setCanArchive(canArchive);

  // More: by a click or Enter, or by itself once it scrolls into the drawer's view.
  moreButton.addEventListener("click", () => loadMore());
  const observer =
    "IntersectionObserver" in window
      ? new IntersectionObserver(
          (entries) => {
            if (entries.some((entry) => entry.isIntersecting)) loadMore();
          },
          { root: threadsPanel, rootMargin: "0px 0px 120px 0px" },
        )
      : null;
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

  return { load, loadMore, refreshAfterRun, markCurrent, isOpen, close };
}
