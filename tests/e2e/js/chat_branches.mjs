// contrib.chat's message operations in Debian's Chromium: Copy, Regenerate (refused, offline,
// then accepted), ‹ 2/2 › branch navigation (which survives a reload), Edit (offline, then a new
// branch), Fork, and a refused tool call's card shown as failed, live and after a reload.
//
// Usage: node chat_branches.mjs <base-url> <username> <password> <artifacts-dir> <prefix>
// Screenshots go to <artifacts-dir>/<prefix>-<name>.png. Prints one JSON document.
import { join } from "node:path";
import { lastTurn, launch, login, refuseRuns, urlThread, waitForStatus, watch } from "./chat_page.mjs";

const [baseUrl, username, password, artifacts, prefix] = process.argv.slice(2);
if (!prefix) {
  console.error("usage: node chat_branches.mjs <base-url> <username> <password> <dir> <prefix>");
  process.exit(2);
}

const report = { steps: [], consoleErrors: [], pageErrors: [], screenshots: [] };
const shot = async (page, name) => {
  const path = join(artifacts, `${prefix}-${name}.png`);
  await page.screenshot({ path });
  report.screenshots.push(path);
};

// Every turn: its kind, its text, the labels of its buttons, its ‹ i/n › and its tool call ids.
const turns = (page) =>
  page.evaluate(() =>
    Array.from(document.querySelectorAll("#log .turn"), (turn) => ({
      kind: turn.classList.contains("user") ? "user" : "assistant",
      text: Array.from(turn.querySelectorAll(".bubble"), (n) => n.textContent).join(""),
      buttons: Array.from(turn.querySelectorAll(".message-actions button"), (b) => b.getAttribute("aria-label")),
      branch: turn.querySelector(".branch-count")?.textContent ?? null,
      toolCalls: Array.from(turn.querySelectorAll(".tool"), (card) => card.dataset.toolCallId),
    })),
  );

const lastOf = (list, kind) => list.filter((turn) => turn.kind === kind).at(-1);

// Wait until the last turn of `kind` offers the button labelled `label` (or shows `branch`).
const waitForButton = (page, kind, label) =>
  page.waitForFunction(
    ([kind, label]) => {
      const all = document.querySelectorAll(`#log .turn.${kind}`);
      const turn = all[all.length - 1];
      return Boolean(turn && turn.querySelector(`button[aria-label="${label}"]`));
    },
    [kind, label],
    { timeout: 20000 },
  );
const waitForBranch = (page, kind, text) =>
  page.waitForFunction(
    ([kind, text]) => {
      const all = document.querySelectorAll(`#log .turn.${kind}`);
      return all[all.length - 1]?.querySelector(".branch-count")?.textContent === text;
    },
    [kind, text],
    { timeout: 20000 },
  );
const click = (page, kind, label) => page.locator(`#log .turn.${kind}`).last().locator(`button[aria-label="${label}"]`).click();

const browser = await launch();
try {
  const { context } = browser;
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: baseUrl });
  const page = await context.newPage();
  watch(page, report);
  await login(page, baseUrl, username, password);

  await page.fill("#prompt", "What is 2 + 3?");
  await page.keyboard.press("Enter");
  await waitForStatus(page, "Done", 30000);
  await waitForButton(page, "assistant", "Fork from this message");
  const first = await turns(page);
  const thread = urlThread(page);

  // Copy under the answer: the clipboard gets its markdown.
  await page.locator("#log .turn.assistant button.copy-message").last().click();
  await page.waitForFunction(() => {
    const buttons = document.querySelectorAll(".turn.assistant button.copy-message");
    return buttons[buttons.length - 1].textContent === "Copied";
  });
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  report.steps.push({ step: "sent", turns: first, thread, copied });

  // A regenerate the server refuses (429) changes nothing, and the page says when to retry.
  const refusing = await refuseRuns(page, baseUrl);
  await click(page, "assistant", "Regenerate answer");
  await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("The server refused"), null, {
    timeout: 20000,
  });
  await waitForButton(page, "assistant", "Regenerate answer");
  const refusedStatus = await page.locator("#status").textContent();
  report.steps.push({ step: "regenerate-refused", refusals: refusing.count(), status: refusedStatus, turns: await turns(page) });
  await refusing.stop();

  // Offline, a regenerate and an edit never reach the server, nor does the reload after them:
  // the page shows the thread as stored (not the cut or edited one) and says why, then
  // reloads the thread from the server when the connection is back.
  const notSent = () => document.querySelector("#status").textContent.startsWith("The message was not sent");
  await context.setOffline(true);
  await click(page, "assistant", "Regenerate answer");
  await page.waitForFunction(notSent, null, { timeout: 20000 });
  await waitForButton(page, "assistant", "Regenerate answer");
  const offlineRegenerate = { status: await page.locator("#status").textContent(), turns: await turns(page) };
  await click(page, "user", "Edit message");
  await page.fill("#log .edit-box", "What is 9 - 4?");
  await page.locator("#log .edit-form button[type=submit]").click();
  await page.waitForFunction(() => !document.querySelector("#log .edit-form"), null, { timeout: 20000 });
  await page.waitForFunction(notSent, null, { timeout: 20000 });
  await waitForButton(page, "user", "Edit message");
  const offlineEdit = { status: await page.locator("#status").textContent(), turns: await turns(page) };
  await shot(page, "rerun-offline");
  // The turns shown now are marked: the reload replaces them with new ones.
  await page.evaluate(() => document.querySelectorAll("#log .turn").forEach((turn) => (turn.dataset.beforeReload = "")));
  const threadReload = page.waitForResponse(
    (response) => response.request().method() === "GET" && response.url().endsWith(`/agent/threads/${thread}/`),
    { timeout: 20000 },
  );
  await context.setOffline(false);
  const reload = await threadReload;
  await page.waitForFunction(
    () => {
      const shown = document.querySelectorAll("#log .turn");
      const fresh = document.querySelectorAll("#log .turn[data-decorated]:not([data-before-reload])");
      return shown.length > 0 && fresh.length === shown.length;
    },
    null,
    { timeout: 20000 },
  );
  const online = { status: reload.status(), turns: await turns(page) };
  report.steps.push({ step: "rerun-offline", regenerate: offlineRegenerate, edit: offlineEdit, online });

  // An edit the server refuses (503) changes nothing either: the stored thread is shown again.
  const busy = (route) =>
    route.request().method() === "POST"
      ? route.fulfill({ status: 503, headers: { "Retry-After": "5" }, contentType: "application/json", body: "{}" })
      : route.fallback();
  await page.route(`${baseUrl}/agent/`, busy);
  await click(page, "user", "Edit message");
  await page.fill("#log .edit-box", "What is 9 - 4?");
  await page.locator("#log .edit-form button[type=submit]").click();
  await page.waitForFunction(() => document.querySelector("#status").textContent.startsWith("The server refused"), null, {
    timeout: 20000,
  });
  await waitForButton(page, "user", "Edit message");
  report.steps.push({ step: "edit-refused", status: await page.locator("#status").textContent(), turns: await turns(page) });
  await page.unroute(`${baseUrl}/agent/`, busy);

  // Regenerate: a second answer on a new branch, ‹ 2/2 ›.
  await click(page, "assistant", "Regenerate answer");
  await waitForStatus(page, "Done", 30000);
  await waitForBranch(page, "assistant", "2/2");
  const regenerated = await turns(page);
  await shot(page, "regenerated");
  report.steps.push({ step: "regenerated", turns: regenerated });

  // ‹ goes back to the first answer, and the keyboard stays on the arrows.
  await page.locator("#log .turn.assistant").last().locator("button.previous").focus();
  await page.keyboard.press("Enter");
  await waitForBranch(page, "assistant", "1/2");
  const back = await turns(page);
  const focused = await page.evaluate(() => document.activeElement?.getAttribute("aria-label"));
  await page.reload();
  await waitForBranch(page, "assistant", "1/2");
  const reloaded = await turns(page);
  await click(page, "assistant", "Next branch");
  await waitForBranch(page, "assistant", "2/2");
  const forth = await turns(page);
  report.steps.push({ step: "switched", back, focused, reloaded, forth });

  // Edit: Escape puts the message back; Save sends the new text as a new branch.
  await click(page, "user", "Edit message");
  await page.fill("#log .edit-box", "Never mind");
  const editing = await page.evaluate(() => ({
    box: document.activeElement?.classList.contains("edit-box") ?? false,
    bubbleHidden: document.querySelector("#log .turn.user .bubble").hidden,
  }));
  await page.keyboard.press("Escape");
  const cancelled = await turns(page);
  const cancelFocus = await page.evaluate(() => document.activeElement?.getAttribute("aria-label"));
  await click(page, "user", "Edit message");
  await page.fill("#log .edit-box", "What is 6 * 7?");
  await shot(page, "editing");
  await page.locator("#log .edit-form button[type=submit]").click();
  await waitForStatus(page, "Done", 30000);
  await waitForBranch(page, "user", "2/2");
  const edited = await turns(page);
  await shot(page, "edited");
  await page.reload();
  await waitForBranch(page, "user", "2/2");
  const editedReloaded = await turns(page);
  report.steps.push({ step: "edited", editing, cancelled, cancelFocus, edited, editedReloaded });

  // At a phone's width and in dark mode the operations fit.
  await page.emulateMedia({ colorScheme: "dark" });
  await page.setViewportSize({ width: 360, height: 740 });
  const narrow = await page.evaluate(() => ({
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
    navVisible: Array.from(document.querySelectorAll(".branch-nav"), (n) => n.getBoundingClientRect().width > 0),
  }));
  await shot(page, "branches-360-dark");
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1200, height: 820 });
  report.steps.push({ step: "narrow", ...narrow });

  // Fork from the answer: a new thread holding the conversation up to it opens.
  const before = urlThread(page);
  await click(page, "assistant", "Fork from this message");
  await page.waitForFunction((old) => new URL(location.href).searchParams.get("thread") !== old, before, {
    timeout: 20000,
  });
  await page.waitForSelector("#log .turn.assistant .bubble.text", { timeout: 20000 });
  const forkedThread = urlThread(page);
  await page.waitForFunction(() => document.querySelectorAll("#thread-list .thread-title").length >= 2, null, {
    timeout: 20000,
  });
  const forked = await turns(page);
  await page.reload();
  await page.waitForSelector("#log .turn.assistant .bubble.text", { timeout: 20000 });
  report.steps.push({ step: "forked", before, forkedThread, forked, reloaded: await turns(page) });

  // A tool call the tool refuses (ModelRetry) looks failed, live and after a reload.
  await page.click("#new-chat");
  await page.fill("#prompt", "What is 1/0?");
  await page.keyboard.press("Enter");
  await waitForStatus(page, "Done", 30000);
  const live = await lastTurn(page);
  const cardColour = await page.evaluate(() => getComputedStyle(document.querySelector(".tool.failed")).borderTopColor);
  await shot(page, "refused");
  await page.reload();
  await page.waitForSelector("#log .tool", { timeout: 20000 });
  const stored = await lastTurn(page);
  const title = await page.evaluate(() => document.querySelector(".tool .tool-status")?.title ?? null);
  report.steps.push({ step: "refused", live, stored, cardColour, title });
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
