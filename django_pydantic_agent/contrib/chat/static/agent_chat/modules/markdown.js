// Markdown to DOM nodes, safely: headings, paragraphs, emphasis, strike, code spans, links,
// lists, block quotes, rules, tables and fenced code blocks with a Copy button.
//
// It never parses HTML: every piece of text becomes a Text node (createElement + textContent),
// so "<img onerror=...>" in a message shows as those characters. Links are kept only when their
// URL parses as absolute http: or https:, and open with rel="noopener noreferrer"; images
// become links to the image (no request is made for them).
//
// MarkdownView renders a streamed answer incrementally: a block that ended (at a blank line
// outside a code fence, or at its closing fence) is rendered once and never again; only the
// last, still-growing block is rebuilt, and a large one at most once per animation frame. A
// 10,000-word answer costs about its length, not its length squared (docs/benchmarks.md).

import { t } from "./util.js";

const MAX_DEPTH = 8; // block quotes and lists nested deeper than this render as text
const SYNC_LIMIT = 4000; // a live block longer than this re-renders once per frame, not per delta

const FENCE_OPEN = /^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( {0,12})([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;
const TABLE_RULE = /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/;
const BLANK = /^[ \t]*$/;

function node(tag, className) {
  const element = document.createElement(tag);
  if (className) element.className = className;
  return element;
}

// ---------------------------------------------------------------- inline

const PUNCTUATION = /[!-/:-@[-`{-~]/;
const SPACE = /\s/;
const WORD = /[\p{L}\p{N}]/u;

// The URL as an absolute http(s) address, or null.
export function safeUrl(text) {
  let url;
  try {
    url = new URL(text.trim());
  } catch {
    return null;
  }
  return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
}

function link(href, children) {
  const anchor = node("a");
  anchor.href = href;
  anchor.rel = "noopener noreferrer";
  anchor.target = "_blank";
  anchor.append(...children);
  return anchor;
}

// Whether the delimiter run at `i` (length `n`) may open / close emphasis.
function canOpen(text, i, n, char) {
  const after = text[i + n];
  if (after === undefined || SPACE.test(after)) return false;
  if (char === "_" && i > 0 && WORD.test(text[i - 1])) return false;
  return true;
}
function canClose(text, i, n, char) {
  const before = text[i - 1];
  if (before === undefined || SPACE.test(before)) return false;
  if (char === "_" && WORD.test(text[i + n] || "")) return false;
  return true;
}

// The end (exclusive) of the bracketed text opened at `i`, or -1.
function closingBracket(text, i) {
  let depth = 0;
  for (let j = i; j < text.length; j += 1) {
    const c = text[j];
    if (c === "\\") j += 1;
    else if (c === "[") depth += 1;
    else if (c === "]") {
      depth -= 1;
      if (depth === 0) return j;
    }
  }
  return -1;
}

// Parse `text` into inline nodes: `[nodes]`.
export function inline(text, depth = 0) {
  const out = [];
  let plain = "";
  const flush = () => {
    if (plain) out.push(document.createTextNode(plain));
    plain = "";
  };
  // Delimiters known to have no closer after some position: later searches fail at once.
  const noCloser = new Set();
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c === "\\" && PUNCTUATION.test(text[i + 1] || "")) {
      plain += text[i + 1];
      i += 2;
      continue;
    }
    if (c === "`") {
      let n = 1;
      while (text[i + n] === "`") n += 1;
      const fence = "`".repeat(n);
      let close = text.indexOf(fence, i + n);
      while (close !== -1 && text[close + n] === "`") {
        let m = n;
        while (text[close + m] === "`") m += 1;
        close = text.indexOf(fence, close + m);
      }
      if (close === -1) {
        plain += fence;
        i += n;
        continue;
      }
      let code = text.slice(i + n, close).replace(/\n/g, " ");
      if (code.length > 2 && code.startsWith(" ") && code.endsWith(" ")) code = code.slice(1, -1);
      flush();
      const element = node("code");
      element.textContent = code;
      out.push(element);
      i = close + n;
      continue;
    }
    if ((c === "[" || (c === "!" && text[i + 1] === "[")) && depth < MAX_DEPTH) {
      const open = c === "!" ? i + 1 : i;
      const end = closingBracket(text, open);
      if (end !== -1 && text[end + 1] === "(") {
        const close = text.indexOf(")", end + 2);
        if (close !== -1) {
          const target = text.slice(end + 2, close).trim().split(/\s+/)[0].replace(/^<(.*)>$/, "$1");
          const href = safeUrl(target);
          const label = text.slice(open + 1, end);
          flush();
          const children = label ? inline(label, depth + 1) : [document.createTextNode(target)];
          out.push(...(href ? [link(href, children)] : children));
          i = close + 1;
          continue;
        }
      }
    }
    if (c === "<") {
      const close = text.indexOf(">", i);
      const href = close !== -1 && /^<https?:\/\/[^\s<>]+>$/i.test(text.slice(i, close + 1)) ? safeUrl(text.slice(i + 1, close)) : null;
      if (href) {
        flush();
        out.push(link(href, [document.createTextNode(text.slice(i + 1, close))]));
        i = close + 1;
        continue;
      }
    }
    if ((c === "h" || c === "H") && (i === 0 || !WORD.test(text[i - 1]))) {
      const match = /^https?:\/\/[^\s<>]+/i.exec(text.slice(i, i + 2048));
      if (match) {
        let url = match[0].replace(/[.,:;!?'"*_~]+$/, "");
        while (url.endsWith(")") && (url.match(/\(/g) || []).length < (url.match(/\)/g) || []).length) url = url.slice(0, -1);
        const href = safeUrl(url);
        if (href) {
          flush();
          out.push(link(href, [document.createTextNode(url)]));
          i += url.length;
          continue;
        }
      }
    }
    if ((c === "*" || c === "_" || c === "~") && depth < MAX_DEPTH) {
      let n = 1;
      while (text[i + n] === c) n += 1;
      const width = c === "~" ? (n >= 2 ? 2 : 0) : Math.min(n, 2);
      const delimiter = c.repeat(width);
      if (width && !noCloser.has(delimiter) && canOpen(text, i, width, c)) {
        let close = text.indexOf(delimiter, i + width + 1);
        while (close !== -1 && !canClose(text, close, width, c)) close = text.indexOf(delimiter, close + 1);
        if (close !== -1) {
          flush();
          const element = node(c === "~" ? "del" : width === 2 ? "strong" : "em");
          element.append(...inline(text.slice(i + width, close), depth + 1));
          out.push(element);
          i = close + width;
          continue;
        }
        noCloser.add(delimiter);
      }
      plain += text.slice(i, i + n);
      i += n;
      continue;
    }
    plain += c;
    i += 1;
  }
  flush();
  return out;
}

// Paragraph text: inline markdown, a line break where the source breaks a line.
function inlineLines(lines, depth) {
  const out = [];
  lines.forEach((line, index) => {
    if (index) out.push(node("br"));
    out.push(...inline(line.trim(), depth));
  });
  return out;
}

// ---------------------------------------------------------------- blocks

function startsBlock(line, next) {
  return (
    FENCE_OPEN.test(line) ||
    HEADING.test(line) ||
    RULE.test(line) ||
    QUOTE.test(line) ||
    /^ {0,3}(?:[-*+]|1[.)])[ \t]+\S/.test(line) ||
    (line.includes("|") && next !== undefined && TABLE_RULE.test(next) && next.includes("-"))
  );
}

function cells(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  const out = [];
  let cell = "";
  let code = false;
  for (let i = 0; i < row.length; i += 1) {
    const c = row[i];
    if (c === "\\" && row[i + 1] === "|") {
      cell += "|";
      i += 1;
    } else if (c === "`") {
      code = !code;
      cell += c;
    } else if (c === "|" && !code) {
      out.push(cell.trim());
      cell = "";
    } else cell += c;
  }
  out.push(cell.trim());
  return out;
}

function copyButton(source) {
  const button = node("button", "button ghost small copy-code");
  button.type = "button";
  button.textContent = t("Copy");
  button.setAttribute("aria-label", t("Copy code"));
  button.addEventListener("click", () => copyText(source(), button));
  return button;
}

// Put `text` on the clipboard; `button` says "Copied" (or "Copy failed") for two seconds.
export async function copyText(text, button) {
  let ok = false;
  try {
    await navigator.clipboard.writeText(text);
    ok = true;
  } catch {
    ok = false;
  }
  if (!button) return ok;
  const label = button.dataset.label || button.textContent;
  button.dataset.label = label;
  button.textContent = ok ? t("Copied") : t("Copy failed");
  button.classList.toggle("copied", ok);
  clearTimeout(button.copyTimer);
  button.copyTimer = setTimeout(() => {
    button.textContent = label;
    button.classList.remove("copied");
  }, 2000);
  return ok;
}

function codeBlock(language, text) {
  const wrap = node("div", "code-block");
  const head = node("div", "code-head");
  const name = node("span", "code-lang");
  name.textContent = language;
  const code = node("code");
  code.textContent = text;
  if (language) code.dataset.language = language;
  const pre = node("pre");
  pre.tabIndex = 0; // a long line scrolls sideways with the keyboard
  pre.append(code);
  head.append(name, copyButton(() => code.textContent));
  wrap.append(head, pre);
  return wrap;
}

// Parse `lines` into block nodes.
function blocks(lines, depth = 0) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (BLANK.test(line)) {
      i += 1;
      continue;
    }
    const fence = FENCE_OPEN.exec(line);
    if (fence) {
      const marker = fence[1];
      const indent = line.length - line.trimStart().length;
      const body = [];
      i += 1;
      while (i < lines.length && !new RegExp(`^ {0,3}${marker[0]}{${marker.length},}[ \\t]*$`).test(lines[i])) {
        body.push(lines[i].slice(Math.min(indent, lines[i].length - lines[i].trimStart().length)));
        i += 1;
      }
      i += 1; // the closing fence (or the end)
      out.push(codeBlock(fence[2], body.join("\n")));
      continue;
    }
    const heading = HEADING.exec(line);
    if (heading) {
      const level = heading[1].length;
      const element = node(`h${Math.min(level + 2, 6)}`, `md-h${level}`);
      element.append(...inline(heading[2] || "", depth));
      out.push(element);
      i += 1;
      continue;
    }
    if (RULE.test(line)) {
      out.push(node("hr"));
      i += 1;
      continue;
    }
    if (QUOTE.test(line) && depth < MAX_DEPTH) {
      const inner = [];
      while (i < lines.length && !BLANK.test(lines[i])) {
        const quoted = QUOTE.exec(lines[i]);
        inner.push(quoted ? quoted[1] : lines[i]);
        i += 1;
      }
      const quote = node("blockquote");
      quote.append(...blocks(inner, depth + 1));
      out.push(quote);
      continue;
    }
    const item = ITEM.exec(line);
    if (item && depth < MAX_DEPTH) {
      const ordered = /\d/.test(item[2]);
      const list = node(ordered ? "ol" : "ul");
      if (ordered && parseInt(item[2], 10) !== 1) list.start = parseInt(item[2], 10);
      const base = item[1].length;
      let current = null;
      let body = [];
      let contentIndent = base + 2;
      const close = () => {
        if (!current) return;
        const parsed = blocks(body, depth + 1);
        // A tight item: its one paragraph's text sits in the <li> itself.
        if (parsed.length && parsed[0].tagName === "P") current.append(...parsed.shift().childNodes);
        current.append(...parsed);
        list.append(current);
      };
      let previousBlank = false;
      while (i < lines.length) {
        const text = lines[i];
        const marker = ITEM.exec(text);
        const indent = text.length - text.trimStart().length;
        if (marker && marker[1].length <= base + 1 && /\d/.test(marker[2]) === ordered) {
          close();
          current = node("li");
          body = [marker[3] || ""];
          contentIndent = marker[1].length + marker[2].length + 1;
          previousBlank = false;
        } else if (BLANK.test(text)) {
          if (i + 1 < lines.length) {
            const next = lines[i + 1];
            const nextIndent = next.length - next.trimStart().length;
            const nextMarker = ITEM.exec(next);
            const continues = nextIndent > base || (nextMarker && nextMarker[1].length <= base + 1 && /\d/.test(nextMarker[2]) === ordered);
            if (!continues) break;
          }
          body.push("");
          previousBlank = true;
        } else if (indent > base) {
          body.push(text.slice(Math.min(indent, contentIndent)));
        } else if (!previousBlank && !startsBlock(text, lines[i + 1])) {
          body.push(text.trim()); // a lazy continuation line
        } else break;
        i += 1;
      }
      close();
      out.push(list);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      const head = cells(line);
      const aligns = cells(lines[i + 1]).map((spec) =>
        spec.startsWith(":") && spec.endsWith(":") ? "center" : spec.endsWith(":") ? "right" : spec.startsWith(":") ? "left" : "",
      );
      i += 2;
      const table = node("table");
      const thead = node("thead");
      const headRow = node("tr");
      head.forEach((text, column) => {
        const th = node("th");
        th.scope = "col";
        if (aligns[column]) th.style.textAlign = aligns[column];
        th.append(...inline(text, depth));
        headRow.append(th);
      });
      thead.append(headRow);
      const tbody = node("tbody");
      while (i < lines.length && !BLANK.test(lines[i]) && lines[i].includes("|")) {
        const row = node("tr");
        const values = cells(lines[i]);
        for (let column = 0; column < head.length; column += 1) {
          const td = node("td");
          if (aligns[column]) td.style.textAlign = aligns[column];
          td.append(...inline(values[column] || "", depth));
          row.append(td);
        }
        tbody.append(row);
        i += 1;
      }
      table.append(thead, tbody);
      const wrap = node("div", "table-wrap");
      wrap.tabIndex = 0; // a wide table scrolls sideways with the keyboard
      wrap.append(table);
      out.push(wrap);
      continue;
    }
    const paragraph = [line];
    i += 1;
    while (i < lines.length && !BLANK.test(lines[i]) && !startsBlock(lines[i], lines[i + 1])) {
      paragraph.push(lines[i]);
      i += 1;
    }
    const p = node("p");
    p.append(...inlineLines(paragraph, depth));
    out.push(p);
  }
  return out;
}

// Markdown `text` as block nodes.
export function renderMarkdown(text) {
  return blocks(String(text || "").split(/\r?\n/));
}

// What `text` reads as once rendered, as one line of plain text: no heading marks, emphasis,
// code ticks or link targets (a link keeps its text), a numbered item its number, blocks
// joined by a space. For the drawer's titles and previews, which are the user's own text.
export function plainText(text) {
  const box = node("div");
  box.append(...renderMarkdown(text));
  box.querySelectorAll(".code-head").forEach((head) => head.remove());
  box.querySelectorAll("ol").forEach((list) => {
    Array.from(list.children).forEach((item, index) => item.prepend(`${list.start + index}. `));
  });
  box.querySelectorAll("br").forEach((br) => br.replaceWith(" "));
  box.querySelectorAll("p, h3, h4, h5, h6, li, pre, th, td, blockquote, hr").forEach((block) => block.after(" "));
  return box.textContent.replace(/\s+/g, " ").trim();
}

// A container whose markdown grows: `update(text)` with the whole text so far.
export class MarkdownView {
  constructor(container) {
    this.container = container;
    this.source = "";
    this.committed = 0; // source offset up to which blocks are rendered for good
    this.live = []; // the nodes of the block still growing
    this.frame = 0;
  }

  // Show `text`: a continuation of what is shown renders only what is new.
  update(text) {
    text = String(text || "");
    // A different text (a replayed message starts over) renders afresh. Comparing the last
    // characters of the finished part keeps each update O(1) instead of O(length).
    const from = Math.max(0, this.committed - 64);
    if (text.length < this.committed || text.slice(from, this.committed) !== this.source.slice(from, this.committed)) {
      this.reset();
    }
    this.source = text;
    if (this.source.length - this.committed <= SYNC_LIMIT) this.render();
    else if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
  }

  // Render now whatever a frame was waiting for (the end of a message, a Stop).
  flush() {
    if (this.frame) this.render();
  }

  reset() {
    this.container.replaceChildren();
    this.source = "";
    this.committed = 0;
    this.live = [];
  }

  render() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    const tail = this.source.slice(this.committed);
    // Complete lines only; a block ends at a blank line or a closing fence, outside a fence.
    let boundary = 0;
    let fence = null;
    let start = 0;
    for (let end = tail.indexOf("\n"); end !== -1; start = end + 1, end = tail.indexOf("\n", start)) {
      const line = tail.slice(start, end);
      if (fence) {
        if (fence.test(line)) {
          fence = null;
          boundary = end + 1;
        }
      } else {
        const open = FENCE_OPEN.exec(line);
        if (open) {
          if (start > boundary && tail.slice(boundary, start).trim()) boundary = start;
          fence = new RegExp(`^ {0,3}${open[1][0]}{${open[1].length},}[ \\t]*$`);
        } else if (BLANK.test(line)) boundary = end + 1;
      }
    }
    for (const old of this.live) old.remove();
    if (boundary) {
      const done = renderMarkdown(tail.slice(0, boundary));
      this.container.append(...done);
      this.committed += boundary;
    }
    this.live = renderMarkdown(this.source.slice(this.committed));
    this.container.append(...this.live);
  }
}
