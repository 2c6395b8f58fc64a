// contrib.chat's thread drawer in Debian's Chromium: every page of threads, search with marked
// snippets (a hostile title and snippet among them), archive and unarchive across a reload,
// and the open thread's export as Markdown and JSON.
//
// Usage: node chat_drawer.mjs <base-url> <username> <password> <artifacts-dir> <prefix> <count>
// <count> threads <prefix>-00 … and <prefix>-hostile were stored for <username> beforehand
// (store_drawer.py). Screenshots go to <artifacts-dir>/<prefix>-<name>.png. Prints one JSON
// document of what the page showed.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { launch, login, watch } from "./chat_page.mjs";

const [baseUrl, username, password, artifacts, prefix, countText] = process.argv.slice(2);
if (!countText) {
  console.error("usage: node chat_drawer.mjs <base-url> <username> <password> <dir> <prefix> <count>");
  process.exit(2);
}
const total = Number(countText) + 1; // and the hostile one

const report = { steps: [], consoleErrors: [], pageErrors: [], screenshots: [] };
const shot = async (page, name, options = {}) => {
  const path = join(artifacts, `${prefix}-${name}.png`);
  await page.screenshot({ path, ...options });
  report.screenshots.push(path);
};

// What the drawer lists now.
const drawer = (page) =>
  page.evaluate(() => ({
    ids: Array.from(document.querySelectorAll("#thread-list .thread"), (li) => li.dataset.threadId),
    titles: Array.from(document.querySelectorAll("#thread-list .thread-title"), (n) => n.textContent),
    snippets: Array.from(document.querySelectorAll("#thread-list .thread-snippet"), (n) => n.textContent),
    marks: Array.from(document.querySelectorAll("#thread-list mark"), (n) => n.textContent),
    none: document.querySelector("#thread-list .none")?.textContent ?? null,
    more: !document.getElementById("more-threads").hidden,
    announced: document.getElementById("thread-announce").textContent,
    error: document.getElementById("thread-error").hidden ? null : document.getElementById("thread-error").textContent,
    archivedPressed: document.getElementById("show-archived").getAttribute("aria-pressed"),
    archiveButtons: Array.from(document.querySelectorAll("#thread-list .thread-archive:not([hidden])"), (b) =>
      b.getAttribute("aria-label"),
    ),
  }));

// Wait until the list shows what `ready(listing)` accepts (polling what `drawer` reads).
async function until(page, ready, what, timeout = 15000) {
  const deadline = Date.now() + timeout;
  let last;
  while (Date.now() < deadline) {
    last = await drawer(page);
    if (ready(last)) return last;
    await page.waitForTimeout(100);
  }
  throw new Error(`timed out waiting for ${what}: ${JSON.stringify(last).slice(0, 800)}`);
}

async function search(page, words) {
  await page.fill("#thread-search", words);
  return until(page, (d) => d.announced.includes(words) || d.none?.includes(words), `a search for ${words}`);
}

async function readDownload(page, buttonId) {
  const [download] = await Promise.all([page.waitForEvent("download"), page.click(`#${buttonId}`)]);
  const path = await download.path();
  return { name: download.suggestedFilename(), text: readFileSync(path, "utf-8") };
}

const browser = await launch();
try {
  const page = await browser.context.newPage();
  watch(page, report);
  await login(page, baseUrl, username, password);
  const first = await until(page, (d) => d.ids.length > 0, "the first page");
  report.steps.push({
    step: "first",
    count: first.ids.length,
    more: first.more,
    searchHint: await page.textContent("#thread-search-hint"),
    searchLabel: await page.evaluate(() => document.querySelector('label[for="thread-search"]').textContent),
    moreTag: await page.evaluate(() => document.getElementById("more-threads").tagName),
  });

  // The next page by keyboard: Enter on More puts focus on the first thread it added.
  await page.focus("#more-threads");
  await page.keyboard.press("Enter");
  const second = await until(page, (d) => d.ids.length > first.ids.length, "the second page");
  const focused = await page.evaluate(() => document.activeElement.dataset.threadId || null);
  report.steps.push({ step: "keyboard-more", count: second.ids.length, focused, firstNew: second.ids[first.ids.length] });

  // The rest by scrolling the drawer to its end, until no page is left.
  let listing = second;
  for (let i = 0; i < 20 && (listing.more || listing.ids.length < total); i += 1) {
    await page.evaluate(() => {
      const panel = document.getElementById("threads");
      panel.scrollTop = panel.scrollHeight;
    });
    await page.waitForTimeout(300);
    listing = await drawer(page);
  }
  await page.locator(`#thread-list .thread[data-thread-id="${prefix}-00"]`).scrollIntoViewIfNeeded();
  await shot(page, "drawer-end");
  report.steps.push({ step: "scrolled", count: listing.ids.length, unique: new Set(listing.ids).size, more: listing.more, last: listing.ids[listing.ids.length - 1] });

  // A refresh (here after a rename of the oldest) keeps every page shown.
  const oldest = page.locator(`#thread-list .thread[data-thread-id="${prefix}-00"]`);
  await oldest.hover();
  await oldest.locator(".thread-rename").click();
  await page.fill("#thread-list .rename-form input", "Trip zero");
  await page.keyboard.press("Enter");
  const afterRename = await until(page, (d) => d.titles.includes("Trip zero"), "the renamed thread");
  report.steps.push({ step: "refresh-keeps-pages", count: afterRename.ids.length, more: afterRename.more });

  // A word from a message (the default store searches message text; others titles only).
  const quokka = await search(page, "quokka");
  await shot(page, "search-quokka");
  report.steps.push({ step: "search-message", ...quokka });

  // A hostile title and snippet: marked, shown as text, never run.
  const zebra = await search(page, "zebrafish");
  await shot(page, "search-hostile");
  const hostile = await page.evaluate(() => ({
    owned: window.__owned ?? null,
    elements: document.querySelectorAll("#thread-list img, #thread-list script").length,
  }));
  report.steps.push({ step: "search-hostile", ...zebra, ...hostile });

  // A hostile message's snippet (the default store searches message text).
  const narwhal = await search(page, "narwhal");
  const hostileSnippet = await page.evaluate(() => ({
    owned: window.__owned ?? null,
    elements: document.querySelectorAll("#thread-list img, #thread-list script").length,
  }));
  await shot(page, "search-hostile-snippet");
  report.steps.push({ step: "search-hostile-snippet", ...narwhal, ...hostileSnippet });

  // Escape empties the search and brings the whole list back.
  await page.focus("#thread-search");
  await page.keyboard.press("Escape");
  const cleared = await until(page, (d) => d.marks.length === 0 && d.snippets.length === 0 && d.ids.length > 1, "the list again");
  report.steps.push({ step: "cleared", value: await page.inputValue("#thread-search"), count: cleared.ids.length });

  // Archive the newest trip: it leaves the list, is under Archived, and stays so after a reload.
  const target = `${prefix}-${String(total - 2).padStart(2, "0")}`;
  const row = page.locator(`#thread-list .thread[data-thread-id="${target}"]`);
  await row.hover();
  await row.locator(".thread-archive").click();
  const archived = await until(page, (d) => !d.ids.includes(target), "the archived thread to leave");
  await page.reload();
  await page.waitForSelector("#thread-list .thread");
  const afterReload = await drawer(page);
  await page.click("#show-archived");
  const archivedView = await until(page, (d) => d.announced.startsWith("Archived conversations:"), "the archived list");
  await shot(page, "archived");
  const unarchiveLabels = archivedView.archiveButtons;
  const back = page.locator(`#thread-list .thread[data-thread-id="${target}"]`);
  await back.hover();
  await back.locator(".thread-archive").click();
  const emptied = await until(page, (d) => !d.ids.includes(target), "the unarchived thread to leave the archived list");
  await page.click("#show-archived");
  const restored = await until(page, (d) => d.announced.startsWith("Conversations:"), "the thread back");
  await page.reload();
  await page.waitForSelector("#thread-list .thread");
  const restoredAfterReload = await drawer(page);
  report.steps.push({
    step: "archive",
    target,
    archivedAnnounced: archived.announced,
    listedAfterArchive: archived.ids.includes(target),
    listedAfterReload: afterReload.ids.includes(target),
    archivedIds: archivedView.ids,
    unarchiveLabels,
    archivedEmpty: emptied.none,
    backAnnounced: emptied.announced,
    restored: restored.ids.includes(target),
    restoredAfterReload: restoredAfterReload.ids.includes(target),
  });

  // Pin an old trip (where the store keeps pins): it leads the list, after a reload too.
  const canPin = await page.evaluate(() => document.getElementById("app").dataset.threadTags === "1");
  const pinTarget = `${prefix}-05`;
  let pinned = null;
  if (canPin) {
    const old = page.locator(`#thread-list .thread[data-thread-id="${pinTarget}"]`);
    await search(page, "Trip 05");
    await old.hover();
    await old.locator(".thread-pin").click();
    await page.focus("#thread-search");
    await page.keyboard.press("Escape");
    const led = await until(page, (d) => d.ids[0] === pinTarget, "the pinned thread to lead");
    await page.reload();
    await page.waitForSelector("#thread-list .thread");
    const reloaded = await drawer(page);
    pinned = {
      first: led.ids[0],
      firstAfterReload: reloaded.ids[0],
      marked: await page.locator(`#thread-list .thread.pinned[data-thread-id="${pinTarget}"]`).count(),
      pressed: await page.locator(`#thread-list .thread[data-thread-id="${pinTarget}"] .thread-pin`).getAttribute("aria-pressed"),
    };
  }
  report.steps.push({ step: "pin", canPin, target: pinTarget, pinned });

  // Export the open thread: the downloaded files hold its messages.
  const exportHiddenOnNewChat = await page.isHidden("#export");
  await search(page, "Trip 07");
  await page.click(`#thread-list .thread-open[data-thread-id="${prefix}-07"]`);
  await page.waitForSelector("#export:not([hidden])");
  const markdown = await readDownload(page, "export-markdown");
  const json = await readDownload(page, "export-json");
  await shot(page, "export");
  report.steps.push({ step: "export", exportHiddenOnNewChat, markdown, json });

  // A phone's width in dark mode, the drawer open on a search.
  await page.emulateMedia({ colorScheme: "dark" });
  await page.setViewportSize({ width: 360, height: 740 });
  await page.click("#drawer-toggle");
  await search(page, "trip");
  const narrow = await page.evaluate(() => ({
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    markBackground: getComputedStyle(document.querySelector("#thread-list mark")).backgroundColor,
    searchVisible: document.getElementById("thread-search").getBoundingClientRect().width > 100,
  }));
  await shot(page, "drawer-360-dark");
  report.steps.push({ step: "narrow", ...narrow });

  // A server that says its store cannot archive (an injected 400): the drawer says so and
  // stops offering Archive.
  await page.route("**/agent/threads/*/", (route) =>
    route.request().method() === "PATCH"
      ? route.fulfill({
          status: 400,
          contentType: "application/json",
          body: JSON.stringify({ error: "This server's conversation store cannot archive threads." }),
        })
      : route.continue(),
  );
  const refusedButton = page.locator("#thread-list .thread-archive").first();
  const refusedTitle = await page.locator("#thread-list .thread-open").first().getAttribute("title");
  await refusedButton.click();
  const refused = await until(page, (d) => d.error !== null, "the refusal");
  report.steps.push({
    step: "archive-refused",
    title: refusedTitle,
    error: refused.error,
    archiveButtons: refused.archiveButtons.length,
    toggleHidden: await page.isHidden("#show-archived"),
  });
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
