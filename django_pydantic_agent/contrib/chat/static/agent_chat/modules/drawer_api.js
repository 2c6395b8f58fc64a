// The drawer's list and its requests beyond transport.js: a page of threads (search, archived,
// cursor), the archived flag, and an export.
//
// `GET threads/?limit=&q=&archived=1&cursor=` answers {threads, nextCursor}; `PATCH
// threads/<id>/ {"archived": bool}` sets the flag (400 on a store that keeps none); `GET
// threads/<id>/export/?format=markdown|json` is the thread as a download.

export function createDrawerApi({ agentUrl, csrfToken }) {
  const json = { Accept: "application/json" };
  const threadUrl = (id) => `${agentUrl}threads/${encodeURIComponent(id)}/`;
  const send = (url, init = {}) => fetch(url, { credentials: "same-origin", ...init });

  return {
    // One page of the caller's threads: `q` searches, `archived` lists the archived ones,
    // `cursor` is the previous page's nextCursor.
    listPage({ limit, q = "", archived = false, tag = "", cursor = null }) {
      const query = new URLSearchParams({ limit: String(limit) });
      if (q) query.set("q", q);
      if (archived) query.set("archived", "1");
      if (tag) query.set("tag", tag);
      if (cursor) query.set("cursor", cursor);
      return send(`${agentUrl}threads/?${query}`, { headers: json });
    },

    setArchived(id, archived) {
      return send(threadUrl(id), {
        method: "PATCH",
        headers: { "Content-Type": "application/json", ...json, "X-CSRFToken": csrfToken },
        body: JSON.stringify({ archived }),
      });
    },

    // Pin or tag a thread: `labels` is {pinned} and/or {tags}.
    setLabels(id, labels) {
      return send(threadUrl(id), {
        method: "PATCH",
        headers: { "Content-Type": "application/json", ...json, "X-CSRFToken": csrfToken },
        body: JSON.stringify(labels),
      });
    },

    // `format`: "markdown" or "json".
    exportThread(id, format) {
      const query = new URLSearchParams({ format });
      return send(`${threadUrl(id)}export/?${query}`);
    },
  };
}
