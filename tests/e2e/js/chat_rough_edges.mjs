// contrib.chat's rough edges in Debian's Chromium: what only a browser shows.
//
// Usage: node chat_rough_edges.mjs <base-url> <username> <password> <artifacts-dir> <markdown-thread-id>
// <markdown-thread-id> was stored for <username> beforehand (store_thread.py markdown): its title
// and preview are markdown. Checks, in order: the search box's placeholder fits the box; the
// drawer shows that thread's title and preview as plain text; a fenced code block (and inline
// code) in the user's own bubble is readable in the light and the dark scheme (contrast of its
// text on what is behind it); after a reload the reasoning still says how long it took; and a
// send that fails (offline, the connection dropped, the server refusing with its JSON error)
// says so in words with Retry, in view, even after a long message grew the composer.
// Screenshots go to <artifacts-dir>. Prints one JSON document of what the page showed.
import { join } from "node:path";
import { launch, login, waitForStatus, watch } from "./chat_page.mjs";

const [baseUrl, username, password, artifacts, markdownThread] = process.argv.slice(2);
if (!markdownThread) {
  console.error("usage: node chat_rough_edges.mjs <base-url> <username> <password> <dir> <markdown-thread>");
  process.exit(2);
}

const report = { steps: [], consoleErrors: [], pageErrors: [], screenshots: [] };
const shot = async (page, name) => {
  const path = join(artifacts, `rough-${name}.png`);
  await page.screenshot({ path });
  report.screenshots.push(path);
};

// The WCAG contrast ratio of each code element's text on the colour behind it (the nearest
// ancestor with an opaque background), in the last user bubble.
const codeContrast = (page) =>
  page.evaluate(() => {
    const rgb = (value) => {
      const [r, g, b, a = 1] = value.match(/[\d.]+/g).map(Number);
      return { r, g, b, a };
    };
    const luminance = ({ r, g, b }) => {
      const channel = (v) => {
        const c = v / 255;
        return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
      };
      return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
    };
    // The colour behind `node`: its own and its ancestors' backgrounds, blended top down.
    const behind = (node) => {
      const layers = [];
      for (let at = node; at; at = at.parentElement) {
        const colour = rgb(getComputedStyle(at).backgroundColor);
        if (colour.a > 0) layers.push(colour);
        if (colour.a >= 1) break;
      }
      let base = { r: 255, g: 255, b: 255 };
      for (const layer of layers.reverse()) {
        base = {
          r: layer.r * layer.a + base.r * (1 - layer.a),
          g: layer.g * layer.a + base.g * (1 - layer.a),
          b: layer.b * layer.a + base.b * (1 - layer.a),
        };
      }
      return base;
    };
    const ratio = (node) => {
      const text = luminance(rgb(getComputedStyle(node).color));
      const back = luminance(behind(node));
      return Math.round(((Math.max(text, back) + 0.05) / (Math.min(text, back) + 0.05)) * 100) / 100;
    };
    const bubbles = document.querySelectorAll(".turn.user .bubble");
    const bubble = bubbles[bubbles.length - 1];
    return {
      block: ratio(bubble.querySelector("pre code")),
      language: ratio(bubble.querySelector(".code-lang")),
      inline: ratio(bubble.querySelector("p code")),
      text: ratio(bubble.querySelector("p")),
    };
  });

// Whether the send-failed notice and its Retry button are inside the log's visible box and the
// window, and what the notice says.
const failedNotice = (page) =>
  page.evaluate(() => {
    const notices = document.querySelectorAll(".notice.send-failed");
    const notice = notices[notices.length - 1];
    const retry = notice.querySelector("button.retry");
    const log = document.getElementById("log").getBoundingClientRect();
    const inside = (node) => {
      const box = node.getBoundingClientRect();
      return box.top >= log.top - 1 && box.bottom <= log.bottom + 1 && box.bottom <= window.innerHeight;
    };
    return {
      text: notice.textContent,
      noticeInView: inside(notice),
      retryInView: inside(retry),
      composer: document.getElementById("prompt").value,
      notices: notices.length,
    };
  });

// A message of many lines: the composer grows when it comes back to it.
const LONG_MESSAGE = Array.from({ length: 8 }, (_, i) => `Line ${i + 1} of a long question.`).join("\n");

const browser = await launch();
try {
  const { context } = browser;
  const page = await context.newPage();
  watch(page, report);
  await login(page, baseUrl, username, password);

  // The search box: its placeholder fits inside it.
  const search = await page.evaluate(() => {
    const box = document.getElementById("thread-search");
    const style = getComputedStyle(box);
    const context2d = document.createElement("canvas").getContext("2d");
    context2d.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    const room = box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return { placeholder: box.placeholder, textWidth: context2d.measureText(box.placeholder).width, room };
  });
  report.steps.push({ step: "search", ...search });

  // The drawer: the markdown thread's title and preview as plain text.
  const item = page.locator(`#thread-list .thread[data-thread-id="${markdownThread}"]`);
  await item.waitFor();
  const drawer = await item.evaluate((li) => ({
    title: li.querySelector(".thread-title").textContent,
    tooltip: li.querySelector(".thread-open").title,
    preview: li.querySelector(".thread-preview").textContent,
    rename: li.querySelector(".thread-rename").getAttribute("aria-label"),
  }));
  report.steps.push({ step: "drawer", ...drawer });

  // Code in the user's own bubble, in the light scheme and then the dark one.
  await page.emulateMedia({ colorScheme: "light" });
  await page.fill("#prompt", "Why does `print` fail here?\n\n```python\nprint('hello'\n```");
  await page.keyboard.press("Enter");
  await waitForStatus(page, "Done", 30000);
  const light = await codeContrast(page);
  await shot(page, "code-light");
  await page.emulateMedia({ colorScheme: "dark" });
  const dark = await codeContrast(page);
  await shot(page, "code-dark");
  await page.emulateMedia({ colorScheme: "light" });
  const live = await page.evaluate(() =>
    Array.from(document.querySelectorAll(".turn.assistant details.reasoning summary"), (s) => s.textContent),
  );
  report.steps.push({ step: "code", light, dark });

  // The reasoning says how long it took, live and after a reload.
  await page.reload();
  await page.waitForSelector(".turn.assistant details.reasoning", { timeout: 15000 });
  const reloaded = await page.evaluate(() =>
    Array.from(document.querySelectorAll(".turn.assistant details.reasoning summary"), (s) => s.textContent),
  );
  report.steps.push({ step: "reasoning", live, reloaded });

  // Sends that fail, each on the conversation just reloaded (its log full, at a laptop's
  // height), after a message of many lines (the composer grows with it when it comes back).
  await page.setViewportSize({ width: 1200, height: 620 });
  const failures = {};
  const attempt = async (name, prepare, undo) => {
    await page.reload();
    await page.waitForSelector(".turn.assistant details.reasoning", { timeout: 15000 });
    await prepare();
    await page.fill("#prompt", LONG_MESSAGE);
    await page.keyboard.press("Enter");
    await page.waitForSelector(".notice.send-failed");
    await page.waitForTimeout(100); // whatever scrolls, scrolls now
    failures[name] = await failedNotice(page);
    await shot(page, `send-${name}`);
    await undo();
  };
  await attempt(
    "offline",
    () => context.setOffline(true),
    () => context.setOffline(false),
  );
  const drop = (route) => (route.request().method() === "POST" ? route.abort("connectionreset") : route.fallback());
  await attempt(
    "dropped",
    () => page.route(`${baseUrl}/agent/`, drop),
    () => page.unroute(`${baseUrl}/agent/`, drop),
  );
  const refuse = (route) =>
    route.request().method() === "POST"
      ? route.fulfill({
          status: 400,
          contentType: "application/json",
          body: JSON.stringify({ error: "The message is longer than this server takes (8 lines at most)." }),
        })
      : route.fallback();
  await attempt(
    "refused",
    () => page.route(`${baseUrl}/agent/`, refuse),
    () => page.unroute(`${baseUrl}/agent/`, refuse),
  );
  report.steps.push({ step: "failed", ...failures });
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
