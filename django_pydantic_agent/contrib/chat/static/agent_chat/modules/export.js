// Export the open conversation as Markdown or JSON: GET threads/<id>/export/?format=...,
// saved as a download under the server's file name. The two buttons show while a stored
// conversation is open (one with messages); a refusal is said beside them.

import { errorText } from "./transport.js";
import { el, t } from "./util.js";

// The file name of a Content-Disposition header, else `fallback`.
function fileName(response, fallback) {
  const header = response.headers.get("Content-Disposition") || "";
  const match = /filename="([^"\\/]+)"/.exec(header);
  return match ? match[1] : fallback;
}

function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = el("a");
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}

export function createExport({ api, state }) {
  const group = document.getElementById("export");
  const error = document.getElementById("export-error");
  if (!group) return { update() {} };
  const formats = { "export-markdown": ["markdown", "md"], "export-json": ["json", "json"] };

  function showError(text) {
    error.textContent = text;
    error.hidden = !text;
  }

  for (const [id, [format, extension]] of Object.entries(formats)) {
    const button = document.getElementById(id);
    button.addEventListener("click", async () => {
      showError("");
      const threadId = state.threadId;
      button.disabled = true;
      try {
        const response = await api.exportThread(threadId, format);
        if (!response.ok) {
          showError(t("Could not export: {why}", { why: await errorText(response) }));
          return;
        }
        download(await response.blob(), fileName(response, `thread.${extension}`));
      } catch (caught) {
        showError(t("Could not export: {why}", { why: caught.message }));
      } finally {
        button.disabled = false;
      }
    });
  }

  return {
    // Show the buttons when the open conversation has messages (so it is stored).
    update() {
      const stored = state.threadsAvailable && state.transcript.length > 0;
      if (group.hidden === stored) showError("");
      group.hidden = !stored;
    },
  };
}
