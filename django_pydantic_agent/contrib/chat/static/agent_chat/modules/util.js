// Small DOM and formatting helpers shared by the chat page's modules.

// The page's strings in the visitor's language: the template puts Django's translations of every
// msgid in contrib/chat/strings.py into <script type="application/json" id="agent-chat-strings">.
let catalogue = null;

// `text` translated ("{name}" placeholders filled from `values`); the English text when unknown.
export function t(text, values) {
  if (catalogue === null) {
    const script = document.getElementById("agent-chat-strings");
    try {
      catalogue = script ? JSON.parse(script.textContent) : {};
    } catch {
      catalogue = {};
    }
  }
  const translated = Object.hasOwn(catalogue, text) ? catalogue[text] : text;
  if (!values) return translated;
  return translated.replace(/\{(\w+)\}/g, (whole, name) => (name in values ? String(values[name]) : whole));
}

export function newId() {
  if (window.crypto && typeof crypto.randomUUID === "function") {
    return crypto.randomUUID();
  }
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// An element with a class and text; text always goes through textContent, never innerHTML.
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** The text of AG-UI message content: a string, or the text parts of a list joined by lines. */
export function textOf(content) {
  if (typeof content === "string") return content;
  return (content || [])
    .filter((part) => part && part.type === "text")
    .map((part) => part.text)
    .join("\n");
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// A 20px line icon; `paths` are constant SVG path data, never user input.
export function icon(...paths) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("width", "18");
  svg.setAttribute("height", "18");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  for (const d of paths) {
    const path = document.createElementNS(ns, "path");
    path.setAttribute("d", d);
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", "currentColor");
    path.setAttribute("stroke-width", "2");
    path.setAttribute("stroke-linecap", "round");
    path.setAttribute("stroke-linejoin", "round");
    svg.append(path);
  }
  return svg;
}

export const PENCIL = ["M12 20h9", "M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z"];
export const TRASH = ["M3 6h18", "M8 6V4h8v2", "M19 6l-1 14H6L5 6", "M10 11v6", "M14 11v6"];

export function prettyJson(text) {
  if (!text) return "{}";
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

export function formatSize(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KB", "MB", "GB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value < 10 && !Number.isInteger(value) ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

// "text/*, image/*, application/pdf" as a person would say it: "text, images, PDF".
export function describeTypes(types) {
  const names = { "text/*": "text", "image/*": "images", "application/pdf": "PDF", "application/json": "JSON" };
  const words = types.map((type) => names[type] || type);
  return words.length > 1 ? `${words.slice(0, -1).join(", ")} or ${words[words.length - 1]}` : words.join("");
}

// Ask in the page's own <dialog id="confirm-dialog">: resolves true when the person confirms.
// Escape and Cancel answer false; focus returns to where it was.
export function askConfirm(text) {
  const dialog = document.getElementById("confirm-dialog");
  const back = document.activeElement;
  document.getElementById("confirm-text").textContent = text;
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        if (back && typeof back.focus === "function" && back.isConnected) back.focus();
        resolve(dialog.returnValue === "confirm");
      },
      { once: true },
    );
    dialog.showModal();
  });
}

// When to try again, from a 429 or 503 answer's Retry-After header: "in 30 s", or "".
export function retryAfter(response) {
  const header = response.headers.get("Retry-After");
  if (!header) return "";
  let seconds = Number(header);
  if (!Number.isFinite(seconds)) {
    const when = Date.parse(header);
    seconds = Number.isNaN(when) ? NaN : Math.ceil((when - Date.now()) / 1000);
  }
  if (!Number.isFinite(seconds) || seconds < 0) return "";
  return t("Try again in {seconds} s.", { seconds: Math.max(1, Math.ceil(seconds)) });
}
