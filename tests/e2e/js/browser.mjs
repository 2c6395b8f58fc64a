// Drive the example project's chat page in Debian's headless Chromium, as a person would.
//
// Usage: node browser.mjs <base-url> <username> <password> <screenshot.png>
// Environment: CHROMIUM (default /usr/bin/chromium).
// Logs in, asks an arithmetic question, waits for the streamed answer, takes a screenshot,
// then asks for a long answer and presses Stop mid-stream, then reloads the page and reopens
// the thread from the drawer (the partial answer was saved). In a new chat it attaches two text
// files, removes one, sends a message with the other, reloads and downloads it from the
// reopened thread; then it tries an oversized file and a refused type. Then it stops a run in a
// new chat and watches the drawer list it without a reload, renames that thread (a refused title
// first), deletes it, and finally uses the page at 375px: the drawer behind its toggle and the
// one-row composer. Screenshots go to <screenshot> and <screenshot>-<name>.png (attached,
// upload-error, stopped, renamed, mobile-drawer, mobile). Prints one JSON document of what the
// page showed at each step.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [baseUrl, username, password, screenshot] = process.argv.slice(2);
if (!screenshot) {
  console.error("usage: node browser.mjs <base-url> <username> <password> <screenshot.png>");
  process.exit(2);
}

// The flags that keep Chromium quiet on a machine without outside network, running as root.
const FLAGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const report = { steps: [], consoleErrors: [], pageErrors: [] };
const profile = mkdtempSync(join(tmpdir(), "example-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  args: FLAGS,
  viewport: { width: 1200, height: 820 },
});

async function lastTurn(page) {
  return page.evaluate(() => {
    const turns = document.querySelectorAll(".turn.assistant");
    const turn = turns[turns.length - 1];
    if (!turn) return null;
    const text = Array.from(turn.querySelectorAll(".bubble.text"), (n) => n.textContent).join("");
    const tools = Array.from(turn.querySelectorAll(".tool"), (card) => {
      const values = card.querySelectorAll("dd");
      return {
        name: card.querySelector(".tool-name").textContent,
        args: values[0].textContent,
        result: values[1].textContent,
      };
    });
    const reasoning = Array.from(turn.querySelectorAll("details.reasoning"), (d) => ({
      summary: d.querySelector("summary").textContent,
      body: d.querySelector(".body").textContent,
      open: d.open,
    }));
    const notices = Array.from(turn.querySelectorAll(".notice"), (n) => n.textContent);
    return { text, tools, reasoning, notices, turns: turns.length };
  });
}

const status = (page) => page.locator("#status").textContent();
// The drawer's thread titles, most recent first.
const threadTitles = (page) => page.locator("#thread-list .thread-title").allTextContents();

const NOTES = "Shopping list\n- coffee\n- more coffee\n";
const sibling = (suffix) => screenshot.replace(/\.png$/, "") + `-${suffix}.png`;

async function attach(page, name, mimeType, buffer) {
  await page.setInputFiles("#attach-input", { name, mimeType, buffer });
}

// GET a URL with the page's cookies; report the status, the body text and the disposition.
async function download(page, url) {
  return page.evaluate(async (href) => {
    const response = await fetch(href, { credentials: "same-origin" });
    return {
      status: response.status,
      disposition: response.headers.get("content-disposition"),
      type: response.headers.get("content-type"),
      text: response.ok ? await response.text() : null,
    };
  }, url);
}

async function uploadError(page) {
  await page.waitForSelector("#upload-error:not([hidden])", { timeout: 20000 });
  const error = page.locator("#upload-error");
  const result = { text: await error.textContent(), status: await error.getAttribute("data-status") };
  return result;
}

try {
  const page = context.pages()[0] || (await context.newPage());
  page.on("console", (message) => {
    if (message.type() === "error") report.consoleErrors.push(message.text());
  });
  page.on("pageerror", (error) => report.pageErrors.push(String(error)));

  // 1. The chat page sends a stranger to the login form.
  await page.goto(`${baseUrl}/`);
  report.steps.push({ step: "redirected", url: page.url() });
  await page.fill("#id_username", username);
  await page.fill("#id_password", password);
  await Promise.all([page.waitForURL(`${baseUrl}/`), page.click("button[type=submit]")]);
  await page.waitForSelector("#prompt");
  report.steps.push({ step: "logged-in", url: page.url(), title: await page.title() });

  // 2. One question: reasoning, a tool call and streamed text.
  await page.fill("#prompt", "What is 12 * (3 + 4)?");
  await page.keyboard.press("Enter");
  await page.waitForSelector(".tool", { timeout: 15000 });
  const midway = await page.locator("#stop").isEnabled();
  await page.waitForFunction(() => document.querySelector("#status").textContent === "Done", null, {
    timeout: 20000,
  });
  await page.waitForSelector("#thread-list .thread-open"); // the drawer refreshes after each run
  await page.waitForSelector("#thread-usage:not([hidden])"); // GET usage/ after each run
  report.steps.push({
    step: "answered",
    usage: await page.locator("#thread-usage").textContent(),
    stopEnabledWhileRunning: midway,
    stopEnabledAfter: await page.locator("#stop").isEnabled(),
    status: await status(page),
    turn: await lastTurn(page),
    threads: await threadTitles(page),
  });
  // Open the reasoning block so the screenshot shows every kind of part.
  await page.click("details.reasoning summary");
  await page.screenshot({ path: screenshot, fullPage: false });

  // 3. A long answer, stopped while it streams: the text must stop growing.
  await page.fill("#prompt", "Tell me a long story about streaming.");
  await page.click("#send");
  await page.waitForFunction(
    () => {
      const bubbles = document.querySelectorAll(".turn.assistant:last-child .bubble.text");
      return bubbles.length && bubbles[bubbles.length - 1].textContent.length > 40;
    },
    null,
    { timeout: 20000 },
  );
  await page.click("#stop");
  // Stop asks the server to cancel (or, without the route, aborts the request); once the page
  // says "Stopped", nothing more may arrive.
  await page.waitForFunction(() => document.querySelector("#status").textContent === "Stopped", null, {
    timeout: 15000,
  });
  const atStop = (await lastTurn(page)).text.length;
  await page.waitForTimeout(1500);
  const stopped = await lastTurn(page);
  report.steps.push({
    step: "stopped",
    status: await status(page),
    lengthAtStop: atStop,
    lengthLater: stopped.text.length,
    turn: stopped,
    sendEnabled: await page.locator("#send").isEnabled(),
  });

  // 4. Reload: the thread is listed, and opening it shows the stored conversation, with the
  // stopped run saved as far as it had streamed. The server saves once it has noticed the
  // disconnect, normally within milliseconds; reopen for a few seconds before giving up.
  let attempts = 0;
  for (;;) {
    attempts += 1;
    await page.reload();
    await page.waitForSelector("#thread-list .thread-open", { timeout: 10000 });
    await page.click("#thread-list .thread-open");
    await page.waitForSelector(".turn.user");
    if ((await page.locator(".turn.user").count()) >= 2 || attempts >= 10) break;
    await page.waitForTimeout(500);
  }
  report.steps.push({
    step: "reloaded",
    attempts,
    threads: await threadTitles(page),
    userBubbles: await page.locator(".turn.user .bubble").allTextContents(),
    toolNames: await page.locator(".tool .tool-name").allTextContents(),
    lastTurn: await lastTurn(page),
  });

  // 5. A new chat with attachments: two files attached, one removed, the other sent.
  await page.click("#new-chat");
  await attach(page, "notes.txt", "text/plain", Buffer.from(NOTES));
  await page.waitForSelector("#pending .file-chip[data-attachment-id]", { timeout: 10000 });
  await attach(page, "scratch.txt", "text/plain", Buffer.from("to be removed"));
  await page.waitForFunction(
    () => document.querySelectorAll("#pending .file-chip[data-attachment-id]").length === 2,
    null,
    { timeout: 10000 },
  );
  const removedId = await page
    .locator("#pending .file-chip", { hasText: "scratch.txt" })
    .getAttribute("data-attachment-id");
  await page.click('#pending button[aria-label="Remove scratch.txt"]');
  await page.waitForFunction(() => document.querySelectorAll("#pending .file-chip").length === 1);
  await page.waitForTimeout(300); // the DELETE is sent after the chip goes
  const pendingChips = await page.locator("#pending .file-chip").allTextContents();
  await page.fill("#prompt", "Please keep my notes with this chat.");
  await page.screenshot({ path: sibling("attached"), fullPage: false });
  await page.click("#send");
  await page.waitForFunction(() => document.querySelector("#status").textContent === "Done", null, {
    timeout: 20000,
  });
  report.steps.push({
    step: "attached",
    pendingChips,
    removed: await download(page, `/agent/attachments/${removedId}/`),
    pendingAfterSend: await page.locator("#pending .file-chip").count(),
    pendingHidden: await page.locator("#pending").isHidden(),
    sentChips: await page.locator(".turn.user .file-chip").allTextContents(),
    // The demo agent read the file with read_attachment and quoted it.
    answer: await lastTurn(page),
  });

  // 6. Reload and reopen that thread: the attachment is listed and downloads.
  await page.reload();
  await page.waitForSelector("#thread-list .thread-open", { timeout: 10000 });
  await page.click("#thread-list .thread-open >> text=Please keep my notes with this chat.");
  await page.waitForSelector(".turn.user .file-chip a", { timeout: 10000 });
  const link = page.locator(".turn.user .file-chip a").first();
  const href = await link.getAttribute("href");
  report.steps.push({
    step: "attachment-reloaded",
    threads: await threadTitles(page),
    chips: await page.locator(".turn.user .file-chip").allTextContents(),
    href,
    downloadAttribute: await link.getAttribute("download"),
    download: await download(page, href),
  });

  // 7. Refusals are shown inline: a file over the cap, then a type not on the allowlist.
  const maxBytes = Number(await page.locator("#app").getAttribute("data-upload-max-bytes"));
  await attach(page, "huge.txt", "text/plain", Buffer.alloc(maxBytes + 100 * 1024, 97));
  const tooLarge = await uploadError(page);
  await page.screenshot({ path: sibling("upload-error"), fullPage: false });
  await attach(page, "archive.zip", "application/zip", Buffer.from("PK\u0003\u0004"));
  await page.waitForFunction(() => document.querySelector("#upload-error").textContent.includes("archive.zip"));
  const refusedType = await uploadError(page);
  report.steps.push({
    step: "refused",
    maxBytes,
    tooLarge,
    refusedType,
    pendingChips: await page.locator("#pending .file-chip").count(),
    sendEnabled: await page.locator("#send").isEnabled(),
  });

  // 8. Stop a run in a new chat: the drawer lists the new thread without a reload (the server
  // saves a stopped run once it notices the disconnect; the page looks again shortly after).
  await page.evaluate(() => {
    window.notReloaded = true;
  });
  await page.click("#new-chat");
  await page.fill("#prompt", "Tell me a long story about streaming.");
  await page.click("#send");
  await page.waitForFunction(
    () => {
      const bubbles = document.querySelectorAll(".turn.assistant:last-child .bubble.text");
      return bubbles.length && bubbles[bubbles.length - 1].textContent.length > 40;
    },
    null,
    { timeout: 20000 },
  );
  await page.click("#stop");
  await page.waitForFunction(
    () =>
      Array.from(document.querySelectorAll("#thread-list .thread-title"), (n) => n.textContent).includes(
        "Tell me a long story about streaming.",
      ),
    null,
    { timeout: 10000 },
  );
  await page.screenshot({ path: sibling("stopped"), fullPage: false });
  const current = page.locator('#thread-list .thread-open[aria-current="true"]');
  report.steps.push({
    step: "drawer-after-stop",
    notReloaded: await page.evaluate(() => window.notReloaded === true),
    threads: await threadTitles(page),
    current: await current.locator(".thread-title").textContent(),
    tooltip: await current.getAttribute("title"),
    preview: await current.locator(".thread-preview").textContent(),
    cutBubbles: await page.locator(".turn.assistant .bubble.text.cut").count(),
    notices: (await lastTurn(page)).notices,
  });

  // 9. Rename it from the keyboard: a refused title is explained inline, then a good one sticks.
  const story = page.locator(".thread", { hasText: "Tell me a long story about streaming." });
  await story.locator(".thread-rename").focus();
  await page.keyboard.press("Enter");
  const titleInput = page.locator(".rename-form input");
  await titleInput.waitFor();
  const editingFocused = await titleInput.evaluate((node) => node === document.activeElement);
  await titleInput.fill("x".repeat(201));
  await page.keyboard.press("Enter");
  await page.waitForSelector(".rename-error:not([hidden])", { timeout: 10000 });
  const refusedRename = await page.locator(".rename-error").textContent();
  await page.screenshot({ path: sibling("rename-error"), fullPage: false });
  await titleInput.fill("  Streaming   story  ");
  await page.keyboard.press("Enter");
  await page.waitForFunction(
    () => Array.from(document.querySelectorAll("#thread-list .thread-title"), (n) => n.textContent).includes("Streaming story"),
    null,
    { timeout: 10000 },
  );
  const focusAfterRename = await page.evaluate(() => document.activeElement.getAttribute("aria-label"));
  await page.reload();
  await page.waitForSelector("#thread-list .thread-open", { timeout: 10000 });
  await page.locator(".thread", { hasText: "Streaming story" }).hover();
  await page.screenshot({ path: sibling("renamed"), fullPage: false });
  report.steps.push({
    step: "renamed",
    editingFocused,
    refusedRename,
    focusAfterRename,
    threadsAfterReload: await threadTitles(page),
  });

  // 10. Delete the open thread (after confirming): it leaves the drawer and the page starts
  // a new chat; a reload agrees.
  await page.click("#thread-list .thread-open >> text=Streaming story");
  await page.waitForSelector(".turn.user");
  // The page asks in its own <dialog> (no window.confirm): first Escape keeps the thread.
  const dialogs = [];
  const nativeDialogs = [];
  page.on("dialog", (dialog) => {
    nativeDialogs.push(dialog.message());
    dialog.dismiss();
  });
  const deleteButton = page.locator(".thread", { hasText: "Streaming story" }).locator(".thread-delete");
  await deleteButton.click();
  await page.waitForSelector("#confirm-dialog[open]");
  await page.keyboard.press("Escape");
  await page.waitForFunction(() => !document.getElementById("confirm-dialog").open);
  const keptAfterEscape = (await threadTitles(page)).includes("Streaming story");
  const focusAfterEscape = await page.evaluate(() => document.activeElement.className);
  await deleteButton.click();
  await page.waitForSelector("#confirm-dialog[open]");
  dialogs.push(await page.locator("#confirm-text").textContent());
  await page.click("#confirm-yes");
  await page.waitForFunction(
    () => !Array.from(document.querySelectorAll("#thread-list .thread-title"), (n) => n.textContent).includes("Streaming story"),
    null,
    { timeout: 10000 },
  );
  const afterDelete = {
    dialogs,
    nativeDialogs,
    keptAfterEscape,
    focusAfterEscape,
    threads: await threadTitles(page),
    turns: await page.locator(".turn").count(),
    emptyShown: await page.locator("#empty").isVisible(),
  };
  await page.reload();
  await page.waitForSelector("#thread-list .thread-open", { timeout: 10000 });
  report.steps.push({ step: "deleted", ...afterDelete, threadsAfterReload: await threadTitles(page) });

  // 11. A phone-sized screen: the drawer hides behind a toggle, the composer is one row.
  await page.setViewportSize({ width: 375, height: 740 });
  const toggle = page.locator("#drawer-toggle");
  const narrow = {
    drawerVisible: await page.locator("#threads").isVisible(),
    toggleVisible: await toggle.isVisible(),
    expanded: await toggle.getAttribute("aria-expanded"),
    controls: await toggle.getAttribute("aria-controls"),
  };
  await toggle.click();
  await page.waitForSelector("#threads .thread-open", { state: "visible" });
  const opened = {
    expanded: await toggle.getAttribute("aria-expanded"),
    threads: await threadTitles(page),
    focusInDrawer: await page.evaluate(() => document.getElementById("threads").contains(document.activeElement)),
  };
  await page.screenshot({ path: sibling("mobile-drawer"), fullPage: false });
  await page.keyboard.press("Escape");
  const afterEscape = {
    expanded: await toggle.getAttribute("aria-expanded"),
    drawerVisible: await page.locator("#threads").isVisible(),
  };
  await toggle.click();
  await page.click("#thread-list .thread-open >> text=What is 12 * (3 + 4)?");
  await page.waitForSelector(".tool");
  const picked = {
    expanded: await toggle.getAttribute("aria-expanded"),
    drawerVisible: await page.locator("#threads").isVisible(),
    userBubbles: await page.locator(".turn.user .bubble").allTextContents(),
  };
  const composer = await page.evaluate(() => {
    const box = (id) => {
      const node = document.getElementById(id);
      const rect = node.getBoundingClientRect();
      const shown = getComputedStyle(node).display !== "none";
      return shown ? { top: rect.top, bottom: rect.bottom, left: rect.left, right: rect.right } : null;
    };
    const args = document.querySelector(".tool dd.args pre");
    return {
      viewport: window.innerWidth,
      pageScrollWidth: document.documentElement.scrollWidth,
      form: box("composer"),
      attach: box("attach"),
      prompt: box("prompt"),
      send: box("send"),
      stop: box("stop"),
      argsScrollable: args.scrollWidth > args.clientWidth,
    };
  });
  await page.screenshot({ path: sibling("mobile"), fullPage: false });
  // While an answer streams, Stop takes Send's place; Stop, and Send is back.
  await page.fill("#prompt", "Tell me a long story about streaming.");
  await page.keyboard.press("Enter");
  await page.waitForSelector("#stop:not([disabled])", { state: "visible", timeout: 15000 });
  const whileRunning = { send: await page.locator("#send").isVisible(), stop: await page.locator("#stop").isVisible() };
  await page.waitForSelector(".turn.assistant:last-child .bubble.text", { timeout: 15000 });
  await page.screenshot({ path: sibling("mobile-running"), fullPage: false });
  await page.click("#stop");
  await page.waitForFunction(() => document.querySelector("#status").textContent === "Stopped");
  const afterStop = { send: await page.locator("#send").isVisible(), stop: await page.locator("#stop").isVisible() };
  report.steps.push({ step: "narrow", ...narrow, opened, afterEscape, picked, composer, whileRunning, afterStop });
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}

process.stdout.write(JSON.stringify(report));
