// contrib.chat's markdown renderer (static/agent_chat/modules/markdown.js) in Debian's Chromium.
//
// Usage: node markdown.mjs <base-url> [words]
// Imports the module from the running server's static files (on its login page: the renderer
// needs no session), renders each case below and reports the HTML it built; streams a markdown
// answer of <words> words (default 10,000) word by word into a MarkdownView and into a view that
// re-renders everything on each word, and reports both times and whether the first block's
// node survived the stream (rendered once). Prints one JSON document.
import { launch, watch } from "./chat_page.mjs";

const [baseUrl, words = "10000"] = process.argv.slice(2);
if (!baseUrl) {
  console.error("usage: node markdown.mjs <base-url> [words]");
  process.exit(2);
}

export const CASES = {
  heading: "# Title\n## Sub *em*",
  emphasis: "Some **bold**, *em*, _em_, ~~gone~~ and `a < b` here.",
  arithmetic: "I asked the calculator, and 12 * (3 + 4) = 84.",
  snake: "call snake_case_name and 2*3*4",
  list: "- one\n- two\n  - nested\n- three",
  ordered: "3. three\n4. four",
  quote: "> quoted\n> text",
  table: "| Name | Qty |\n|:-----|----:|\n| coffee | 2 |\n| `tea` | 1 |",
  code: "```python\nprint('<b>hi</b>')\n```",
  link: "See [the docs](https://example.com/a?b=1) and https://example.org/x.",
  javascriptLink: "[click](javascript:alert(document.domain)) and [data](data:text/html,<script>alert(1)</script>)",
  relativeLink: "[home](/admin/) <javascript:alert(1)>",
  image: "![pixel](https://example.com/p.png)",
  html: "<img src=x onerror=\"window.__owned=1\"> <script>window.__owned=2</script> <b>bold?</b>",
  htmlBlock: "<div onclick=alert(1)>\n<iframe src=\"javascript:alert(1)\"></iframe>\n</div>",
  escaped: "\\*not em\\* and \\<b\\>",
  unclosed: "**bold never closes and `code never closes",
};

//: Titles and previews as the drawer gets them, and what it shows of each (markdown.mjs checks).
export const PLAIN_CASES = {
  heading: "## What does **notes.txt** say?",
  inline: "Use `print()` and _see_ [the docs](https://example.com/d) or ~~not~~.",
  ordered: "3. pack\n4. go",
  code: "Run this:\n\n```python\nprint('hi')\n```",
  html: "<b>not bold</b> & <script>x</script>",
  cut: "…ends with **notes.tx",
};

const report = { steps: [], consoleErrors: [], pageErrors: [] };
const browser = await launch();
try {
  const page = await browser.context.newPage();
  watch(page, report);
  await page.goto(`${baseUrl}/accounts/login/`);
  const rendered = await page.evaluate(async (cases) => {
    const { renderMarkdown } = await import("/static/agent_chat/modules/markdown.js");
    const out = {};
    for (const [name, text] of Object.entries(cases)) {
      const box = document.createElement("div");
      box.append(...renderMarkdown(text));
      document.body.append(box);
      out[name] = box.innerHTML;
    }
    return { out, owned: window.__owned || null };
  }, CASES);
  report.steps.push({ step: "cases", ...rendered });

  // plainText: what a drawer title or preview reads as.
  const plain = await page.evaluate(async (cases) => {
    const { plainText } = await import("/static/agent_chat/modules/markdown.js");
    return Object.fromEntries(Object.entries(cases).map(([name, text]) => [name, plainText(text)]));
  }, PLAIN_CASES);
  report.steps.push({ step: "plain", out: plain });

  const streamed = await page.evaluate(async (count) => {
    const { MarkdownView, renderMarkdown } = await import("/static/agent_chat/modules/markdown.js");
    // A long answer as a model writes one: headings, paragraphs, lists, a table, code.
    const parts = [];
    let n = 0;
    for (let section = 0; n < count; section += 1) {
      parts.push(`## Section ${section}\n\n`);
      const para = [];
      for (let w = 0; w < 60; w += 1) para.push(w % 9 === 0 ? `**word${w}**` : `word${w}`);
      parts.push(`${para.join(" ")}\n\n- item one\n- item *two*\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n\`\`\`js\nconst x = ${section};\n\`\`\`\n\n`);
      n += 70;
    }
    const tokens = parts.join("").split(/(?<= )/);
    const run = async (make, limit) => {
      const box = document.createElement("div");
      document.body.append(box);
      const update = make(box);
      let text = "";
      const started = performance.now();
      let first = null;
      tokens.slice(0, limit).forEach((token, index) => {
        text += token;
        update(text);
        // The first block once later ones have started (the heading is finished by then).
        if (index === 100) first = box.firstElementChild;
      });
      update(text, true);
      const ms = performance.now() - started;
      const html = box.innerHTML;
      const survived = box.firstElementChild === first;
      box.remove();
      return { ms: Math.round(ms), html, survived };
    };
    const incrementalView = (box) => {
      const view = new MarkdownView(box);
      return (text, end) => {
        view.update(text);
        if (end) view.flush();
      };
    };
    const incremental = await run(incrementalView, tokens.length);
    // Re-rendering everything per word is quadratic: timed on the first 2,000 words only.
    const prefix = 2000;
    const incrementalPrefix = await run(incrementalView, prefix);
    const full = await run((box) => (text) => box.replaceChildren(...renderMarkdown(text)), prefix);
    const once = document.createElement("div");
    once.append(...renderMarkdown(tokens.join("")));
    return {
      words: tokens.length,
      characters: tokens.join("").length,
      incrementalMs: incremental.ms,
      prefixWords: prefix,
      incrementalPrefixMs: incrementalPrefix.ms,
      fullRerenderPrefixMs: full.ms,
      firstBlockSurvived: incremental.survived,
      fullFirstBlockSurvived: full.survived,
      sameAsOneRender: incremental.html === once.innerHTML,
    };
  }, Number(words));
  report.steps.push({ step: "stream", ...streamed });
} catch (error) {
  report.error = String(error && error.stack ? error.stack : error);
} finally {
  await browser.close();
}
console.log(JSON.stringify(report));
