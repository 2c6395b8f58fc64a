// Helpers shared by the browser scripts: Debian's Chromium, the login form, what a turn shows.
import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

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

// A headless Chromium with a throwaway profile; `close()` removes the profile again.
export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), "example-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: FLAGS,
    viewport: { width: 1200, height: 820 },
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

// Collect the page's console errors and uncaught exceptions into `report`.
export function watch(page, report) {
  page.on("console", (message) => {
    if (message.type() === "error") report.consoleErrors.push(message.text());
  });
  page.on("pageerror", (error) => report.pageErrors.push(String(error)));
}

export async function login(page, baseUrl, username, password) {
  await page.goto(`${baseUrl}/`);
  await page.fill("#id_username", username);
  await page.fill("#id_password", password);
  await Promise.all([page.waitForURL(`${baseUrl}/`), page.click("button[type=submit]")]);
  await page.waitForSelector("#prompt");
}

// What the last assistant turn shows: text, tool cards, reasoning, notices, status badge.
export async function lastTurn(page) {
  return page.evaluate(() => {
    const turns = document.querySelectorAll(".turn.assistant");
    const turn = turns[turns.length - 1];
    if (!turn) return null;
    const text = Array.from(turn.querySelectorAll(".bubble.text"), (n) => n.textContent).join("");
    const tools = Array.from(turn.querySelectorAll(".tool"), (card) => {
      const values = card.querySelectorAll("dd");
      const badge = card.querySelector(".tool-status");
      return {
        name: card.querySelector(".tool-name").textContent,
        args: values[0].textContent,
        result: values[1].textContent,
        failed: card.classList.contains("failed"),
        badge: badge ? badge.textContent : null,
      };
    });
    const reasoning = Array.from(turn.querySelectorAll("details.reasoning"), (d) => ({
      summary: d.querySelector("summary").textContent,
      body: d.querySelector(".body").textContent,
      open: d.open,
    }));
    const notices = Array.from(turn.querySelectorAll(".notice"), (n) => n.textContent);
    const badge = turn.querySelector(".turn-status");
    return {
      text,
      bubbles: turn.querySelectorAll(".bubble.text").length,
      tools,
      reasoning,
      notices,
      badge: badge ? badge.textContent : null,
      turns: turns.length,
    };
  });
}

// Every assistant turn's status badge (null where there is none), in order.
export async function badges(page) {
  return page.evaluate(() =>
    Array.from(document.querySelectorAll(".turn.assistant"), (turn) => {
      const badge = turn.querySelector(".turn-status");
      return badge ? badge.textContent : null;
    }),
  );
}

export const status = (page) => page.locator("#status").textContent();

export async function waitForStatus(page, text, timeout = 20000) {
  await page.waitForFunction((wanted) => document.querySelector("#status").textContent === wanted, text, { timeout });
}

// The drawer's thread titles, most recent first.
export const threadTitles = (page) => page.locator("#thread-list .thread-title").allTextContents();

// The thread the address bar names, or null.
export const urlThread = (page) => new URL(page.url()).searchParams.get("thread");

// Wait until the last answer's text is longer than `length` characters.
export async function waitForText(page, length, timeout = 20000) {
  await page.waitForFunction(
    (min) => {
      const bubbles = document.querySelectorAll(".turn.assistant:last-child .bubble.text");
      return bubbles.length && bubbles[bubbles.length - 1].textContent.length > min;
    },
    length,
    { timeout },
  );
}

// Refuse every run the page posts to `${baseUrl}/agent/` with a 429 (Retry-After: 30 s) until
// the returned `stop()`; `count()` is how many were refused.
export async function refuseRuns(page, baseUrl) {
  let refusals = 0;
  const refuse = (route) => {
    if (route.request().method() !== "POST") return route.fallback();
    refusals += 1;
    return route.fulfill({
      status: 429,
      headers: { "Retry-After": "30" },
      contentType: "application/json",
      body: JSON.stringify({ error: "Too many requests." }),
    });
  };
  await page.route(`${baseUrl}/agent/`, refuse);
  return { count: () => refusals, stop: () => page.unroute(`${baseUrl}/agent/`, refuse) };
}
