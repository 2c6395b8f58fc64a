// The chat page's thread links, run statuses, Stop and reattach, in Debian's headless Chromium.
//
// Usage: node browser_runs.mjs <base-url> <username> <password> <artifacts-dir> <flows>
// <flows> is "links" or "durable".
//
// links (works on any server): the thread is in the URL and Back/Forward follow it, a linked
// thread opens, an unknown one is refused; Stop sends the cancel POST (and, on a server without
// the route, aborts); a reload during a run tries to reattach and otherwise shows what is
// stored. Then, with the server's answers replaced by page.route: stored "interrupted" and
// "errored" messages show "stopped" / "failed" badges, a tool result with an error and a
// RUN_ERROR during a tool call look failed, and a reload reattaches to a run named by the
// thread's active_run (replayed events) or by sessionStorage (a MESSAGES_SNAPSHOT first), and
// a cancel the server accepts leaves the stream to end on its own terminal event.
//
// durable (a server with runs/<thread>/<run>/ and its cancel/ route): Stop ends the stream with
// the server's cancelled outcome and the stopped answer keeps its badge after a reload; a
// reload mid-run reattaches and the answer streams on to its end, without a doubled word.
//
// Screenshots go to <artifacts-dir>/runs-<name>.png. Prints one JSON document of what the page
// showed at each step.
import { join } from "node:path";
import {
  badges,
  lastTurn,
  launch,
  login,
  status,
  threadTitles,
  urlThread,
  waitForStatus,
  waitForText,
  watch,
} from "./chat_page.mjs";

const [baseUrl, username, password, artifacts, flows] = process.argv.slice(2);
if (!flows) {
  console.error("usage: node browser_runs.mjs <base-url> <username> <password> <artifacts-dir> <links|durable>");
  process.exit(2);
}

const report = { steps: [], consoleErrors: [], pageErrors: [], requests: [] };
const shot = (page, name) => page.screenshot({ path: join(artifacts, `runs-${name}.png`), fullPage: false });
const userBubbles = (page) => page.locator(".turn.user .bubble").allTextContents();
const LONG = "Tell me a long story about streaming.";

// An SSE body of `events`, each frame with `id: <runId>:<seq>` counting from `first`.
function sse(runId, events, first = 1) {
  return events.map((event, index) => `id: ${runId}:${first + index}\ndata: ${JSON.stringify(event)}\n\n`).join("");
}

function fulfillJson(route, body) {
  return route.fulfill({ status: 200, contentType: "application/json", body: JSON.stringify(body) });
}

async function links(page) {
  // 1. A new chat has no thread in the URL; its first message gives it one (same entry).
  const lengthBefore = await page.evaluate(() => history.length);
  const blank = urlThread(page);
  await page.fill("#prompt", "What is 2 + 2?");
  await page.keyboard.press("Enter");
  await waitForStatus(page, "Done");
  const first = urlThread(page);
  const lengthAfter = await page.evaluate(() => history.length);

  // 2. New chat pushes the bare page; its first message names the second thread.
  await page.click("#new-chat");
  const afterNewChat = urlThread(page);
  await page.fill("#prompt", "What time is it on the server?");
  await page.keyboard.press("Enter");
  await waitForStatus(page, "Done");
  const second = urlThread(page);
  await page.waitForFunction(() => document.querySelectorAll("#thread-list .thread-open").length >= 2);

  // 3. Open the first from the drawer, then Back, Back and Forward.
  await page.click("#thread-list .thread-open >> text=What is 2 + 2?");
  await page.waitForFunction((id) => new URL(location.href).searchParams.get("thread") === id, first);
  await page.waitForFunction(() => document.querySelector(".turn.user .bubble")?.textContent === "What is 2 + 2?");
  const opened = { url: urlThread(page), bubbles: await userBubbles(page) };
  await page.goBack();
  await page.waitForFunction(() => document.querySelector(".turn.user .bubble")?.textContent === "What time is it on the server?");
  const back = { url: urlThread(page), bubbles: await userBubbles(page), current: await currentTitle(page) };
  await page.goBack();
  await page.waitForFunction(() => document.querySelector(".turn.user .bubble")?.textContent === "What is 2 + 2?");
  const backAgain = { url: urlThread(page), bubbles: await userBubbles(page) };
  await page.goForward();
  await page.waitForFunction(() => document.querySelector(".turn.user .bubble")?.textContent === "What time is it on the server?");
  const forward = { url: urlThread(page), bubbles: await userBubbles(page) };
  report.steps.push({ step: "history", blank, lengthBefore, lengthAfter, first, afterNewChat, second, opened, back, backAgain, forward });

  // 4. A link to a thread opens it in a fresh tab; a link to an unknown one says so.
  const tab = await page.context().newPage();
  watch(tab, report);
  await tab.goto(`${baseUrl}/?thread=${encodeURIComponent(first)}`);
  await tab.waitForSelector(".turn.user .bubble");
  await tab.waitForSelector('#thread-list .thread-open[aria-current="true"]');
  const linked = {
    bubbles: await userBubbles(tab),
    answer: (await lastTurn(tab)).text,
    current: await currentTitle(tab),
  };
  await tab.goto(`${baseUrl}/?thread=no-such-thread`);
  await tab.waitForFunction(() => document.querySelector("#status").textContent.startsWith("Could not open"));
  const unknown = { status: await status(tab), turns: await tab.locator(".turn").count() };
  await tab.close();
  report.steps.push({ step: "linked", ...linked, unknown });

  // 5. Stop sends the cancel POST with the CSRF token; without the route, it aborts.
  await page.click("#new-chat");
  await page.fill("#prompt", LONG);
  await page.click("#send");
  await waitForText(page, 40);
  const cancel = page.waitForRequest((request) => request.url().includes("/cancel/"));
  await page.click("#stop");
  const request = await cancel;
  const answered = await request.response();
  await waitForStatus(page, "Stopped");
  const stopThread = urlThread(page);
  report.steps.push({
    step: "stop",
    method: request.method(),
    path: new URL(request.url()).pathname,
    csrf: Boolean((await request.allHeaders())["x-csrftoken"]),
    answer: answered ? answered.status() : null,
    thread: stopThread,
    turn: await lastTurn(page),
  });

  // 6. A reload mid-run: the page remembers the run and asks to reattach (after=0); a server
  // without the route answers 404 and the page shows what is stored, ready for the next turn.
  await page.click("#thread-list .thread-open >> text=What is 2 + 2?");
  await page.waitForFunction((id) => new URL(location.href).searchParams.get("thread") === id, first);
  await page.fill("#prompt", LONG);
  await page.click("#send");
  await waitForText(page, 40);
  const remembered = await page.evaluate(() => JSON.parse(sessionStorage.getItem("django-pydantic-agent.chat.live-run")));
  const reattach = page.waitForRequest((r) => r.url().includes("/agent/runs/") && r.method() === "GET");
  await page.reload();
  const reattachRequest = await reattach;
  const reattachResponse = await reattachRequest.response();
  await page.waitForSelector(".turn.user .bubble");
  await page.waitForFunction(() => !document.querySelector("#status").textContent.startsWith("Reconnecting"), null, {
    timeout: 20000,
  });
  report.steps.push({
    step: "reload-mid-run",
    remembered,
    thread: first,
    reattach: new URL(reattachRequest.url()).pathname + new URL(reattachRequest.url()).search,
    reattachStatus: reattachResponse ? reattachResponse.status() : null,
    urlThread: urlThread(page),
    bubbles: await userBubbles(page),
    sendEnabled: await page.locator("#send").isEnabled(),
    stopEnabled: await page.locator("#stop").isEnabled(),
    forgotten: await page.evaluate(() => sessionStorage.getItem("django-pydantic-agent.chat.live-run")),
  });
  await shot(page, "reloaded");
}

async function currentTitle(page) {
  const current = page.locator('#thread-list .thread-open[aria-current="true"] .thread-title');
  return (await current.count()) ? current.textContent() : null;
}

// The server's answers replaced: stored statuses, a failed tool, reattach by either route.
async function mocked(page) {
  await page.route("**/agent/threads/mock-statuses/", (route) =>
    fulfillJson(route, {
      threadId: "mock-statuses",
      title: "Statuses",
      active_run: null,
      messages: [
        { id: "u1", role: "user", content: LONG },
        { id: "a1", role: "assistant", content: "Once upon a time, a stream", status: "interrupted" },
        { id: "u2", role: "user", content: "What is 1 / 0?" },
        {
          id: "a2",
          role: "assistant",
          content: "",
          toolCalls: [{ id: "c1", type: "function", function: { name: "calculate", arguments: '{"expression": "1 / 0"}' } }],
        },
        { id: "t1", role: "tool", toolCallId: "c1", content: "'1 / 0' divides by zero.", error: "ZeroDivisionError" },
        { id: "a3", role: "assistant", content: "The calculator failed.", metadata: { status: "errored" } },
        { id: "u3", role: "user", content: "And now?" },
        { id: "a4", role: "assistant", content: "All good." },
      ],
    }),
  );
  await page.goto(`${baseUrl}/?thread=mock-statuses`);
  await page.waitForSelector(".turn-status");
  const toolCard = page.locator(".tool", { hasText: "calculate" });
  report.steps.push({
    step: "stored-statuses",
    badges: await badges(page),
    tool: {
      failed: await toolCard.evaluate((card) => card.classList.contains("failed")),
      badge: await toolCard.locator(".tool-status").textContent(),
      result: await toolCard.locator("dd").nth(1).textContent(),
    },
  });
  await shot(page, "statuses");

  // A RUN_ERROR while a tool runs: the card and the answer look failed.
  await page.route("**/agent/", (route) => {
    if (route.request().method() !== "POST") return route.fallback();
    const body = JSON.parse(route.request().postData());
    return route.fulfill({
      status: 200,
      contentType: "text/event-stream",
      body: sse(body.runId, [
        { type: "RUN_STARTED", threadId: body.threadId, runId: body.runId },
        { type: "TOOL_CALL_START", toolCallId: "c9", toolCallName: "server_time", parentMessageId: "a9" },
        { type: "TOOL_CALL_ARGS", toolCallId: "c9", delta: "{}" },
        { type: "TOOL_CALL_END", toolCallId: "c9" },
        { type: "RUN_ERROR", message: "The tool crashed.", code: "TOOL_FAILED" },
      ]),
    });
  });
  await page.fill("#prompt", "What time is it on the server?");
  await page.keyboard.press("Enter");
  await waitForStatus(page, "Error");
  const failed = await lastTurn(page);
  await page.locator(".turn.assistant:last-child .tool").scrollIntoViewIfNeeded();
  await shot(page, "tool-failed");
  await page.unroute("**/agent/");
  report.steps.push({ step: "run-error-in-tool", turn: failed });

  // Reattach to the thread's active_run: the run is replayed from its start over the stored
  // partial answer, and nothing is doubled.
  let liveAfter = null;
  await page.route("**/agent/threads/mock-live/", (route) =>
    fulfillJson(route, {
      threadId: "mock-live",
      messages: [
        { id: "u1", role: "user", content: "Keep going" },
        { id: "m1", role: "assistant", content: "Hello" },
      ],
      active_run: { run_id: "run-live", last_seq: 3 },
    }),
  );
  await page.route("**/agent/runs/mock-live/run-live/**", (route) => {
    liveAfter = new URL(route.request().url()).searchParams.get("after");
    return route.fulfill({
      status: 200,
      contentType: "text/event-stream",
      body: sse("run-live", [
        { type: "RUN_STARTED", threadId: "mock-live", runId: "run-live" },
        { type: "TEXT_MESSAGE_START", messageId: "m1", role: "assistant" },
        { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: "Hello" },
        { type: "TEXT_MESSAGE_CONTENT", messageId: "m1", delta: ", again" },
        { type: "TEXT_MESSAGE_END", messageId: "m1" },
        { type: "RUN_FINISHED", threadId: "mock-live", runId: "run-live" },
      ]),
    });
  });
  await page.goto(`${baseUrl}/?thread=mock-live`);
  await waitForStatus(page, "Done");
  report.steps.push({ step: "reattach-active-run", after: liveAfter, turn: await lastTurn(page), bubbles: await userBubbles(page) });

  // Reattach to the run this tab remembers; the stream opens with a MESSAGES_SNAPSHOT, the
  // open message is re-opened and goes on, and the run ends cancelled: "stopped".
  await page.route("**/agent/threads/mock-remembered/", (route) =>
    fulfillJson(route, { threadId: "mock-remembered", messages: [{ id: "u1", role: "user", content: "Two parts" }] }),
  );
  await page.route("**/agent/runs/mock-remembered/run-mem/**", (route) =>
    route.fulfill({
      status: 200,
      contentType: "text/event-stream",
      body: sse("run-mem", [
        { type: "RUN_STARTED", threadId: "mock-remembered", runId: "run-mem" },
        {
          type: "MESSAGES_SNAPSHOT",
          messages: [
            { id: "u1", role: "user", content: "Two parts" },
            { id: "m2", role: "assistant", content: "Part one" },
          ],
        },
        { type: "TEXT_MESSAGE_START", messageId: "m2", role: "assistant" },
        { type: "TEXT_MESSAGE_CONTENT", messageId: "m2", delta: " and part two" },
        { type: "TEXT_MESSAGE_END", messageId: "m2" },
        { type: "RUN_FINISHED", threadId: "mock-remembered", runId: "run-mem", outcome: { type: "cancelled" } },
      ], 5),
    }),
  );
  await page.evaluate(() =>
    sessionStorage.setItem(
      "django-pydantic-agent.chat.live-run",
      JSON.stringify({ threadId: "mock-remembered", runId: "run-mem", lastSeq: 4 }),
    ),
  );
  await page.goto(`${baseUrl}/?thread=mock-remembered`);
  await waitForStatus(page, "Stopped");
  report.steps.push({
    step: "reattach-remembered",
    turn: await lastTurn(page),
    bubbles: await userBubbles(page),
    forgotten: await page.evaluate(() => sessionStorage.getItem("django-pydantic-agent.chat.live-run")),
  });
  await shot(page, "reattached");

  // A server that accepts the cancel (202) but lets the run end on its own: the page reads on
  // to the run's own terminal event instead of aborting. The 202 is held until most of the
  // answer has streamed, so what is left ends well within the page's grace (10 s) however
  // slow the machine.
  let cancels = 0;
  await page.route("**/agent/runs/*/*/cancel/", async (route) => {
    cancels += 1;
    await waitForText(page, 1300, 60000);
    return route.fulfill({ status: 202, contentType: "application/json", body: "{}" });
  });
  await page.click("#new-chat");
  await page.fill("#prompt", LONG);
  await page.click("#send");
  await waitForText(page, 40);
  await page.click("#stop");
  await page.waitForFunction(() => document.querySelector("#status").textContent !== "Stopping…", null, {
    timeout: 60000,
  });
  const statusAfterAccept = await status(page);
  report.steps.push({ step: "cancel-accepted", cancels, status: statusAfterAccept, turn: await lastTurn(page) });
  await page.unrouteAll({ behavior: "ignoreErrors" });
}

async function durable(page) {
  // 1. Stop: the server cancels, the stream ends with outcome cancelled, a reload agrees.
  await page.fill("#prompt", LONG);
  await page.click("#send");
  await waitForText(page, 40);
  const cancel = page.waitForResponse((response) => response.url().includes("/cancel/"));
  await page.click("#stop");
  const answered = await cancel;
  await waitForStatus(page, "Stopped");
  const stopped = await lastTurn(page);
  const thread = urlThread(page);
  await page.waitForTimeout(500);
  await page.reload();
  await page.waitForSelector(".turn.assistant .turn-status", { timeout: 10000 });
  report.steps.push({
    step: "cancelled",
    answer: answered.status(),
    turn: stopped,
    thread,
    reloaded: await lastTurn(page),
  });
  await shot(page, "durable-stopped");

  // 2. Reload mid-run: the page reattaches and the answer streams on to its end.
  await page.click("#new-chat");
  await page.fill("#prompt", LONG);
  await page.click("#send");
  await waitForText(page, 40);
  const before = (await lastTurn(page)).text;
  await page.reload();
  await page.waitForSelector(".turn.assistant .bubble.text", { timeout: 10000 });
  await waitForStatus(page, "Done", 60000);
  report.steps.push({ step: "reattached", before, turn: await lastTurn(page), threads: await threadTitles(page) });
  await shot(page, "durable-reattached");
}

const browser = await launch();
try {
  const page = browser.context.pages()[0] || (await browser.context.newPage());
  watch(page, report);
  page.on("request", (request) => {
    if (request.url().includes("/agent/runs/")) report.requests.push(`${request.method()} ${new URL(request.url()).pathname}`);
  });
  await login(page, baseUrl, username, password);
  if (flows === "durable") {
    await durable(page);
  } else {
    await links(page);
    await mocked(page);
  }
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}

process.stdout.write(JSON.stringify(report));
