// The project of docs/chat-page.md in Debian's Chromium: from the login redirect to an answer.
//
// Usage: node newcomer_chat.mjs <base-url> <username> <password> <artifacts-dir>
// Opens /chat/ without a session and follows the redirect to the login page the docs mount,
// checks its stylesheet applied, logs in, is sent back to /chat/, sends a message and waits
// for the agent's answer (pydantic-ai's test model: "success (no tool calls)"), which only the
// page's scripts can draw. Every response of 400 or more is reported. Prints one JSON document.
import { launch, watch } from "./chat_page.mjs";

const [baseUrl, username, password, artifacts] = process.argv.slice(2);
if (!artifacts) {
  console.error("usage: node newcomer_chat.mjs <base-url> <username> <password> <artifacts-dir>");
  process.exit(2);
}

const report = { steps: [], consoleErrors: [], pageErrors: [], failed: [] };
const browser = await launch();
try {
  const page = await browser.context.newPage();
  watch(page, report);
  page.on("response", (response) => {
    if (response.status() >= 400) report.failed.push(`${response.status()} ${response.url()}`);
  });

  await page.goto(`${baseUrl}/chat/`);
  await page.waitForSelector("#id_username");
  const login = await page.evaluate(() => {
    const card = document.querySelector(".login-card");
    return {
      path: location.pathname + location.search,
      // chat.css gives the card a shadow; without the stylesheet it has none.
      styled: getComputedStyle(card).boxShadow !== "none",
    };
  });
  report.steps.push({ step: "login page", ...login });
  await page.screenshot({ path: `${artifacts}/newcomer-login.png` });

  await page.fill("#id_username", username);
  await page.fill("#id_password", password);
  await Promise.all([page.waitForURL(`${baseUrl}/chat/`), page.click("button[type=submit]")]);
  await page.waitForSelector("#prompt");
  await page.fill("#prompt", "Hello");
  await page.keyboard.press("Enter");
  await page.waitForFunction(
    () => {
      const bubbles = document.querySelectorAll(".turn.assistant .bubble.text");
      return bubbles.length && bubbles[bubbles.length - 1].textContent.includes("(no tool calls)");
    },
    null,
    { timeout: 20000 },
  );
  // The log is aria-busy while the answer streams: wait for the run to end.
  await page.waitForFunction(() => document.querySelector("#log").getAttribute("aria-busy") !== "true");
  const chat = await page.evaluate(() => ({
    path: location.pathname,
    answer: Array.from(document.querySelectorAll(".turn.assistant .bubble.text"), (n) => n.textContent),
    // chat.css lays the top bar out as a flex row; without the stylesheet it is a block.
    styled: getComputedStyle(document.querySelector(".topbar")).display === "flex",
  }));
  report.steps.push({ step: "answer", ...chat });
  await page.screenshot({ path: `${artifacts}/newcomer-chat.png` });
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
