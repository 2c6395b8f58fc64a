// The drawer's search: the words of a query and a snippet with the words it matched marked.
//
// `GET threads/?q=` answers each row with a `snippet`: plain text (the caller's own words, so
// possibly hostile), no markup. The server matches a thread when each query word starts a word
// of it (`pine` finds "pineapple"); the page marks the snippet's words that start with a query
// word the same way. Nothing is parsed as HTML: the snippet is split into text nodes and <mark>
// elements built with createElement and textContent.

//: At most this many words of a query count (the server's MAX_TERMS).
const MAX_TERMS = 8;
// A word as the server's `\w+` sees it: letters, digits (any script) and `_`.
const WORD = /[\p{L}\p{N}\p{M}_]+/gu;

// The query's words, lowercased, at most MAX_TERMS.
export function searchTerms(query) {
  return Array.from(String(query || "").matchAll(WORD), (match) => match[0].toLowerCase()).slice(0, MAX_TERMS);
}

// A fragment of `text` with every word that starts with one of `terms` in a <mark>.
export function markedSnippet(text, terms) {
  const fragment = document.createDocumentFragment();
  const source = String(text || "");
  let at = 0;
  for (const match of source.matchAll(WORD)) {
    const word = match[0].toLowerCase();
    if (!terms.some((term) => word.startsWith(term))) continue;
    if (match.index > at) fragment.append(document.createTextNode(source.slice(at, match.index)));
    const mark = document.createElement("mark");
    mark.textContent = match[0];
    fragment.append(mark);
    at = match.index + match[0].length;
  }
  if (at < source.length) fragment.append(document.createTextNode(source.slice(at)));
  return fragment;
}
