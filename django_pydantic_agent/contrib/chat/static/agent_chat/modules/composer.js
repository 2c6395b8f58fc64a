// The composer: the message box, Send and Stop, and the files attached to the next message.
//
// Files are uploaded to <agent>/attachments/ as soon as they are chosen (or dropped) and go
// with the next user message as its `attachments` list of {id, name, mime, size} refs.

import { errorText } from "./transport.js";
import { describeTypes, el, formatSize, t } from "./util.js";

export function createComposer({ transport, uploadMaxBytes, uploadAccept, onSubmit }) {
  const form = document.getElementById("composer");
  const prompt = document.getElementById("prompt");
  const sendButton = document.getElementById("send");
  const stopButton = document.getElementById("stop");
  const attachButton = document.getElementById("attach");
  const attachInput = document.getElementById("attach-input");
  const pendingList = document.getElementById("pending");
  const uploadError = document.getElementById("upload-error");
  const uploadUrl = transport.uploadUrl;

  let pending = []; // {ref, chip} or {file, chip, uploading: true}: files for the next message
  let busy = false; // a run is streaming

  const uploading = () => pending.some((entry) => entry.uploading);

  function setRunning(isRunning) {
    busy = isRunning;
    sendButton.disabled = isRunning || uploading();
    stopButton.disabled = !isRunning;
    form.classList.toggle("running", isRunning); // narrow screens show Stop in place of Send
    prompt.readOnly = isRunning;
  }

  function showUploadError(text, status = "") {
    uploadError.textContent = text;
    uploadError.dataset.status = String(status);
    uploadError.hidden = false;
  }

  function clearUploadError() {
    uploadError.hidden = true;
    uploadError.textContent = "";
    delete uploadError.dataset.status;
  }

  function updatePending() {
    pendingList.hidden = pending.length === 0;
    sendButton.disabled = busy || uploading();
  }

  function pendingChip(name, size) {
    const chip = el("li", "file-chip uploading");
    chip.append(el("span", "file-name", name), el("span", "file-size", `${formatSize(size)} · uploading…`));
    pendingList.append(chip);
    return chip;
  }

  // Turn an uploading chip into an attached one: name, size and a remove button.
  function attachedChip(entry) {
    const { ref, chip } = entry;
    chip.classList.remove("uploading");
    chip.replaceChildren(el("span", "file-name", ref.name), el("span", "file-size", formatSize(ref.size)));
    chip.dataset.attachmentId = ref.id;
    const remove = el("button", "file-remove", "×");
    remove.type = "button";
    remove.setAttribute("aria-label", `Remove ${ref.name}`);
    remove.title = t("Remove");
    remove.addEventListener("click", () => removeAttachment(entry));
    chip.append(remove);
  }

  function uploadRefusal(file, status, detail) {
    if (status === 413 || (status === null && uploadMaxBytes && file.size > uploadMaxBytes)) {
      return `“${file.name}” is too large: files can be at most ${formatSize(uploadMaxBytes)}.`;
    }
    if (status === 415) {
      const allowed = uploadAccept.length ? ` Attach ${describeTypes(uploadAccept)} files.` : "";
      return `“${file.name}” is a type of file this agent does not accept (${file.type || "unknown type"}).${allowed}`;
    }
    return `Could not attach “${file.name}”: ${detail}`;
  }

  async function upload(file) {
    const entry = { file, chip: pendingChip(file.name, file.size), uploading: true };
    pending.push(entry);
    updatePending();
    let response = null;
    let detail = "";
    try {
      response = await transport.upload(file);
      if (response.status === 201) {
        entry.ref = await response.json();
      } else {
        detail = await errorText(response);
      }
    } catch (error) {
      // No answer at all (status null). For an oversized file that can mean the server
      // refused it and closed the connection before the browser could read the 413.
      detail = error.message;
    }
    entry.uploading = false;
    if (entry.ref) {
      attachedChip(entry);
    } else {
      pending = pending.filter((other) => other !== entry);
      entry.chip.remove();
      const status = response ? response.status : null;
      showUploadError(uploadRefusal(file, status, detail), status ?? "");
    }
    updatePending();
  }

  async function removeAttachment(entry) {
    pending = pending.filter((other) => other !== entry);
    entry.chip.remove();
    updatePending();
    try {
      const response = await transport.deleteAttachment(entry.ref.id);
      if (!response.ok) showUploadError(`Could not delete “${entry.ref.name}”: ${await errorText(response)}`);
    } catch (error) {
      showUploadError(`Could not delete “${entry.ref.name}”: ${error.message}`);
    }
  }

  function attachFiles(files) {
    if (!uploadUrl) return;
    clearUploadError();
    for (const file of files) upload(file);
  }

  // The refs of the attached files, for the message being sent; the composer is emptied.
  function takePending() {
    const refs = [];
    for (const entry of pending) {
      if (entry.uploading || !entry.ref) continue;
      refs.push(entry.ref);
      entry.chip.remove();
    }
    pending = pending.filter((entry) => entry.uploading);
    if (uploadUrl) {
      clearUploadError();
      updatePending();
    }
    return refs;
  }

  // Put refs back in the composer (the server refused the message they went with).
  function restorePending(refs) {
    for (const ref of refs) {
      const entry = { ref, chip: pendingChip(ref.name, ref.size) };
      attachedChip(entry);
      pending.push(entry);
    }
    if (uploadUrl) updatePending();
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = prompt.value;
    if (!text.trim() || busy || uploading()) return;
    prompt.value = "";
    prompt.style.height = "";
    onSubmit(text);
  });

  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  prompt.addEventListener("input", () => {
    prompt.style.height = "auto";
    prompt.style.height = `${Math.min(prompt.scrollHeight, 192)}px`;
  });

  if (uploadUrl) {
    const limits = [];
    if (uploadAccept.length) limits.push(describeTypes(uploadAccept));
    if (uploadMaxBytes) limits.push(`up to ${formatSize(uploadMaxBytes)} each`);
    const hint = `Attach a file${limits.length ? ` (${limits.join(", ")})` : ""}; it goes with your next message.`;
    attachButton.title = hint;
    document.getElementById("attach-hint").textContent = hint;
    attachButton.addEventListener("click", () => attachInput.click());
    attachInput.addEventListener("change", () => {
      attachFiles(Array.from(attachInput.files));
      attachInput.value = ""; // choosing the same file again fires "change" again
    });
    form.addEventListener("dragover", (event) => {
      if (!event.dataTransfer || !Array.from(event.dataTransfer.types).includes("Files")) return;
      event.preventDefault();
      form.classList.add("dropping");
    });
    form.addEventListener("dragleave", () => form.classList.remove("dropping"));
    form.addEventListener("drop", (event) => {
      form.classList.remove("dropping");
      if (!event.dataTransfer || !event.dataTransfer.files.length) return;
      event.preventDefault();
      attachFiles(Array.from(event.dataTransfer.files));
    });
  }

  return {
    prompt,
    stopButton,
    setRunning,
    takePending,
    restorePending,
    // Put `text` back (a send that failed) unless the person has typed something since.
    restoreText(text) {
      if (!prompt.value.trim()) {
        prompt.value = text;
        prompt.dispatchEvent(new Event("input"));
      }
    },
    focus: () => prompt.focus(),
  };
}
