// contrib.chat's page in Debian's Chromium: markdown answers, Copy, dark mode, a phone's width,
// stored hostile content, and the first paint of a long thread and a turn on it.
//
// Usage: node chat_features.mjs <base-url> <username> <password> <artifacts-dir> <prefix>
//          <hostile-thread-id> <long-thread-id>
// The two threads were stored for <username> beforehand (store_thread.py). Screenshots go to
// <artifacts-dir>/<prefix>-<name>.png. Prints one JSON document of what the page showed.
import { join } from "node:path";
import { launch, login, refuseRuns, waitForStatus, watch } from "./chat_page.mjs";

const [baseUrl, username, password, artifacts, prefix, hostileThread, longThread] = process.argv.slice(2);
if (!longThread) {
  console.error("usage: node chat_features.mjs <base-url> <username> <password> <dir> <prefix> <hostile> <long>");
  process.exit(2);
}

const report = { steps: [], consoleErrors: [], pageErrors: [], screenshots: [] };
const shot = async (page, name, options = {}) => {
  const path = join(artifacts, `${prefix}-${name}.png`);
  await page.screenshot({ path, ...options });
  report.screenshots.push(path);
};

// What the last answer's markdown built.
const markdownOf = (page) =>
  page.evaluate(() => {
    const turns = document.querySelectorAll(".turn.assistant");
    const bubble = turns[turns.length - 1]?.querySelector(".bubble.text");
    if (!bubble) return null;
    return {
      headings: Array.from(bubble.querySelectorAll("h3, h4, h5, h6"), (h) => h.textContent),
      strong: Array.from(bubble.querySelectorAll("strong"), (n) => n.textContent),
      links: Array.from(bubble.querySelectorAll("a"), (a) => ({ href: a.href, rel: a.rel, text: a.textContent })),
      tableHead: Array.from(bubble.querySelectorAll("table th"), (n) => n.textContent),
      tableRows: Array.from(bubble.querySelectorAll("table tbody tr"), (tr) => Array.from(tr.cells, (c) => c.textContent)),
      code: Array.from(bubble.querySelectorAll("pre code"), (n) => ({ text: n.textContent, language: n.dataset.language || null })),
      copyButtons: bubble.querySelectorAll("button.copy-code").length,
      listItems: Array.from(bubble.querySelectorAll("li"), (n) => n.textContent),
      rawHtmlAsText: bubble.textContent.includes("<b>this</b>"),
      boldElements: bubble.querySelectorAll("b").length,
    };
  });

const noHorizontalScroll = (page) =>
  page.evaluate(() => ({
    scrollWidth: document.documentElement.scrollWidth,
    clientWidth: document.documentElement.clientWidth,
  }));

const browser = await launch();
try {
  const { context } = browser;
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: baseUrl });
  const page = await context.newPage();
  watch(page, report);
  await login(page, baseUrl, username, password);

  // A markdown answer: heading, emphasis, a link, a table, a code block with Copy.
  await page.fill("#prompt", "Show me a markdown table.");
  await page.keyboard.press("Enter");
  await waitForStatus(page, "Done", 30000);
  const answered = await markdownOf(page);
  await page.locator(".turn.assistant .code-block").last().scrollIntoViewIfNeeded();
  await shot(page, "markdown");
  await page.locator(".turn.assistant button.copy-code").last().click();
  await page.waitForFunction(() => {
    const buttons = document.querySelectorAll(".turn.assistant button.copy-code");
    return buttons[buttons.length - 1].textContent === "Copied";
  });
  const clipboard = await page.evaluate(() => navigator.clipboard.readText());
  // Copy under the answer copies its markdown source; under the question, the question.
  await page.locator(".turn.assistant button.copy-message").last().click();
  await page.waitForFunction(() => {
    const buttons = document.querySelectorAll(".turn.assistant button.copy-message");
    return buttons[buttons.length - 1].textContent === "Copied";
  });
  const answerClipboard = await page.evaluate(() => navigator.clipboard.readText());
  await page.locator(".turn.user button.copy-message").last().click();
  await page.waitForFunction(() => {
    const buttons = document.querySelectorAll(".turn.user button.copy-message");
    return buttons[buttons.length - 1].textContent === "Copied";
  });
  const questionClipboard = await page.evaluate(() => navigator.clipboard.readText());
  report.steps.push({ step: "markdown", markdown: answered, clipboard, answerClipboard, questionClipboard });

  await page.emulateMedia({ colorScheme: "dark" });
  const dark = await page.evaluate(() => ({
    background: getComputedStyle(document.body).backgroundColor,
    codeBackground: getComputedStyle(document.querySelector(".code-block")).backgroundColor,
  }));
  await shot(page, "markdown-dark");
  report.steps.push({ step: "dark", ...dark });

  await page.setViewportSize({ width: 360, height: 740 });
  await page.locator(".turn.assistant .table-wrap").last().scrollIntoViewIfNeeded();
  const narrow = await noHorizontalScroll(page);
  await shot(page, "markdown-360");
  report.steps.push({ step: "narrow", ...narrow });
  await page.emulateMedia({ colorScheme: "light" });
  await page.setViewportSize({ width: 1200, height: 820 });

  // Thumbs down on the answer, where the store keeps feedback (data-feedback="on").
  const pressed = (page) =>
    page.evaluate(() => {
      const turns = document.querySelectorAll(".turn.assistant");
      const turn = turns[turns.length - 1];
      return Array.from(turn.querySelectorAll("button.rate"), (b) => [b.dataset.rating, b.getAttribute("aria-pressed")]);
    });
  const thumbs = await page.evaluate(() => document.getElementById("app").dataset.feedback === "on");
  if (thumbs) {
    await page.locator(".turn.assistant button.rate-down").last().click();
    await page.waitForFunction(() => {
      const buttons = document.querySelectorAll(".turn.assistant button.rate-down");
      return buttons[buttons.length - 1].getAttribute("aria-pressed") === "true";
    });
  }
  report.steps.push({ step: "rated", thumbs, pressed: await pressed(page) });

  // The reloaded thread renders the stored markdown the same way, and the stored rating.
  await page.reload();
  await page.waitForSelector(".turn.assistant .bubble.text table", { timeout: 15000 });
  if (thumbs) await page.waitForSelector(".turn.assistant button.rate", { timeout: 15000 });
  report.steps.push({ step: "reloaded", markdown: await markdownOf(page), pressed: await pressed(page) });

  // Keyboard only: Shift+Enter breaks a line, Enter sends, Escape stops a streaming answer.
  await page.click("#new-chat");
  await page.focus("#prompt");
  await page.keyboard.type("Tell me a long story");
  await page.keyboard.press("Shift+Enter");
  await page.keyboard.type("about streaming.");
  const typed = await page.inputValue("#prompt");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => {
    const bubbles = document.querySelectorAll(".turn.assistant .bubble.text");
    return bubbles.length && bubbles[bubbles.length - 1].textContent.length > 40;
  }, null, { timeout: 20000 });
  await page.keyboard.press("Escape");
  await waitForStatus(page, "Stopped", 20000);
  const lastUser = await page.evaluate(() => {
    const users = document.querySelectorAll(".turn.user .bubble");
    return { text: users[users.length - 1].textContent, breaks: users[users.length - 1].querySelectorAll("br").length };
  });
  const live = await page.evaluate(() => ({
    role: document.getElementById("log").getAttribute("role"),
    live: document.getElementById("log").getAttribute("aria-live"),
    statusRole: document.getElementById("status").getAttribute("role"),
    promptLabel: document.querySelector("label[for=prompt]").textContent,
  }));
  report.steps.push({ step: "keyboard", typed, lastUser, ...live });

  // A send the server refuses with 429 keeps the text, says when to try again, and Retry
  // sends it once the server takes it.
  const refusing = await refuseRuns(page, baseUrl);
  await page.click("#new-chat");
  await page.fill("#prompt", "What is 6 * 7?");
  await page.keyboard.press("Enter");
  await page.waitForSelector(".notice.send-failed");
  const refused = await page.evaluate(() => ({
    notice: document.querySelector(".notice.send-failed").textContent,
    composer: document.getElementById("prompt").value,
    retryButtons: document.querySelectorAll(".notice.send-failed button.retry").length,
  }));
  await shot(page, "send-refused");
  await refusing.stop();
  await page.click(".notice.send-failed button.retry");
  await waitForStatus(page, "Done", 30000);
  const retried = await page.evaluate(() => ({
    users: Array.from(document.querySelectorAll(".turn.user .bubble"), (n) => n.textContent),
    notices: document.querySelectorAll(".notice.send-failed").length,
    composer: document.getElementById("prompt").value,
    answer: document.querySelector(".turn.assistant:last-child .bubble.text").textContent,
  }));
  await page.reload();
  await page.waitForSelector(".turn.assistant .bubble.text", { timeout: 15000 });
  const retriedAfterReload = await page.evaluate(() =>
    Array.from(document.querySelectorAll(".turn.user .bubble"), (n) => n.textContent),
  );
  report.steps.push({ step: "refused", refusals: refusing.count(), ...refused, retried, retriedAfterReload });

  // Offline: the message stays in the composer and the page says so.
  await page.click("#new-chat");
  await context.setOffline(true);
  await page.fill("#prompt", "What is 2 + 2?");
  await page.keyboard.press("Enter");
  await page.waitForSelector(".notice.send-failed");
  const offline = await page.evaluate(() => ({
    notice: document.querySelector(".notice.send-failed").textContent,
    composer: document.getElementById("prompt").value,
  }));
  await context.setOffline(false);
  report.steps.push({ step: "offline", ...offline });

  // Payloads stored in a title, a user message, a tool's name, arguments and result, and an
  // answer; and a file whose name is one, uploaded through the paperclip.
  await page.goto(`${baseUrl}/?thread=${encodeURIComponent(hostileThread)}`);
  await page.waitForSelector(".turn.assistant .tool", { timeout: 15000 });
  await page.setInputFiles("#attach-input", {
    name: "<img src=x onerror=\"window.__owned='file'\">.txt",
    mimeType: "text/plain",
    buffer: Buffer.from("hostile name\n"),
  });
  await page.waitForSelector("#pending .file-chip[data-attachment-id]", { timeout: 10000 });
  await page.fill("#prompt", "<img src=x onerror=\"window.__owned='sent'\"> and [x](javascript:window.__owned='sent-link')");
  await page.keyboard.press("Enter");
  await waitForStatus(page, "Done", 30000);
  await page.reload();
  await page.waitForSelector(".turn.user .file-chip", { timeout: 15000 });
  await page.waitForSelector("#thread-list .thread-title", { timeout: 15000 });
  // Give any payload a chance to fire (an <img onerror> fires once its load fails).
  await page.waitForTimeout(500);
  const hostile = await page.evaluate(() => ({
    owned: window.__owned || null,
    elements: document.querySelectorAll("#app img, #app script, #app iframe, #app b").length,
    javascriptLinks: Array.from(document.querySelectorAll("#app a"), (a) => a.getAttribute("href")).filter(
      (href) => href && !/^(https?:|\/)/.test(href),
    ),
    titles: Array.from(document.querySelectorAll("#thread-list .thread-title"), (n) => n.textContent),
    userTexts: Array.from(document.querySelectorAll(".turn.user .bubble"), (n) => n.textContent),
    fileNames: Array.from(document.querySelectorAll(".turn.user .file-chip"), (n) => n.textContent),
    toolNames: Array.from(document.querySelectorAll(".tool .tool-name"), (n) => n.textContent),
    toolArgs: Array.from(document.querySelectorAll(".tool dd:first-of-type"), (n) => n.textContent),
  }));
  await shot(page, "hostile");
  report.steps.push({ step: "hostile", ...hostile });

  // A stored thread of 1,000 messages: open it from its link, read what the page measured.
  await page.goto(`${baseUrl}/?thread=${encodeURIComponent(longThread)}`);
  await page.waitForFunction(() => performance.getEntriesByName("agent-chat:transcript-painted").length > 0, null, {
    timeout: 30000,
  });
  const firstPaint = await page.evaluate(() => performance.getEntriesByName("agent-chat:transcript-painted")[0].detail);
  await page.waitForFunction(() => performance.getEntriesByName("agent-chat:transcript-complete").length > 0, null, {
    timeout: 30000,
  });
  const long = await page.evaluate((first) => ({
    firstTurns: first.turns,
    firstFilled: first.filled,
    turns: document.querySelectorAll(".turn").length,
    firstUser: document.querySelector(".turn.user .bubble").textContent,
    scriptMs: performance.getEntriesByName("agent-chat:transcript")[0].duration,
    paintedMs: performance.getEntriesByName("agent-chat:transcript-painted")[0].duration,
    completeMs: performance.getEntriesByName("agent-chat:transcript-complete")[0].duration,
    atBottom: Math.abs(document.getElementById("log").scrollHeight - document.getElementById("log").scrollTop - document.getElementById("log").clientHeight) < 4,
  }), firstPaint);
  await shot(page, "long-thread");
  // The oldest message, painted after the first frame, is as reachable as any: find in page
  // finds it, the keyboard reaches its Copy button, and it is in the accessibility tree.
  const oldest = page.locator("#log .turn").first();
  const found = await page.evaluate(() => window.find("Question 0?", true, false, true));
  const copy = oldest.locator("button.copy-message");
  await copy.focus();
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelector("#log .turn button.copy-message").textContent === "Copied", null, {
    timeout: 10000,
  });
  const older = {
    found,
    copied: await page.evaluate(() => navigator.clipboard.readText()),
    aria: await oldest.ariaSnapshot(),
    shown: await oldest.evaluate((turn) => {
      const box = turn.getBoundingClientRect();
      const view = document.getElementById("log").getBoundingClientRect();
      return box.bottom > view.top && box.top < view.bottom; // scrolled into view by focus
    }),
  };
  // A turn on the long thread posts its new message alone (the server keeps the thread and
  // sends the model its own history), and is answered.
  const posted = page.waitForRequest((r) => r.method() === "POST" && r.url() === `${baseUrl}/agent/`);
  await page.fill("#prompt", "What is 6 * 7?");
  await page.keyboard.press("Enter");
  const body = JSON.parse((await posted).postData());
  await waitForStatus(page, "Done", 30000);
  const continued = {
    posted: body.messages.map((m) => ({ role: m.role, content: m.content })),
    turns: await page.locator("#log .turn").count(),
    answer: await page.locator("#log .turn.assistant").last().locator(".bubble.text").textContent(),
  };
  report.steps.push({ step: "long", ...long, older, continued });
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
