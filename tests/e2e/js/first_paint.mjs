// The chat page's first paint of a long stored thread, in Debian's Chromium: a benchmark
// (docs/benchmarks.md), not a test.
//
// Usage: node first_paint.mjs <base-url> <username> <password> <thread-id> [rounds]
// Logs in, then opens /?thread=<thread-id> <rounds> times (default 15) and reads what the page
// records in its Performance timeline on each: "agent-chat:transcript" (the script's work for
// the first paint), "agent-chat:transcript-painted" (from the start of the render to the frame
// after it, with the number of turns painted) and "agent-chat:transcript-complete" (every
// message rendered). Prints one JSON document: every round, and the median and worst of each.
import { launch, login, watch } from "./chat_page.mjs";

const [baseUrl, username, password, thread, rounds = "15"] = process.argv.slice(2);
if (!thread) {
  console.error("usage: node first_paint.mjs <base-url> <username> <password> <thread-id> [rounds]");
  process.exit(2);
}

const report = { rounds: [], consoleErrors: [], pageErrors: [] };
const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};
const round1 = (value) => Math.round(value * 10) / 10;

const browser = await launch();
try {
  const page = await browser.context.newPage();
  watch(page, report);
  await login(page, baseUrl, username, password);
  for (let index = 0; index < Number(rounds); index += 1) {
    await page.goto(`${baseUrl}/?thread=${encodeURIComponent(thread)}`);
    await page.waitForFunction(() => performance.getEntriesByName("agent-chat:transcript-complete").length > 0, null, {
      timeout: 60000,
    });
    report.rounds.push(
      await page.evaluate(() => {
        const entry = (name) => performance.getEntriesByName(name)[0];
        return {
          scriptMs: entry("agent-chat:transcript").duration,
          paintMs: entry("agent-chat:transcript-painted").duration,
          firstTurns: entry("agent-chat:transcript-painted").detail.turns,
          completeMs: entry("agent-chat:transcript-complete").duration,
          turns: document.querySelectorAll("#log .turn").length,
        };
      }),
    );
  }
  for (const key of ["scriptMs", "paintMs", "completeMs"]) {
    const values = report.rounds.map((round) => round[key]);
    report[key] = { median: round1(median(values)), worst: round1(Math.max(...values)) };
  }
  report.overFrame = report.rounds.filter((round) => round.paintMs > 1000 / 60).length;
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
