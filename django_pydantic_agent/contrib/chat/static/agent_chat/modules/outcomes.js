// How a tool call ended, from what the server sends about its result.
//
// pydantic-ai records a tool result's outcome in the tool message's `encryptedValue`: the JSON
// `{"pydantic_ai": {"outcome": ...}}`, streamed as REASONING_ENCRYPTED_VALUE (subtype "message",
// the tool message's id) right after TOOL_CALL_RESULT, and kept on the stored tool message, so
// a reload reads the same. "retried" is a call the tool refused (ModelRetry: the model is told
// why and may try again), "denied" one that was not allowed to run, "failed" one that raised.

//: The badge of a tool call that did not succeed, by pydantic-ai outcome.
const LABELS = { retried: "refused", denied: "denied", failed: "failed" };

// "refused", "denied", "failed" or null (a success, or nothing known) for a tool message.
export function toolOutcome(message) {
  const value = message && message.encryptedValue;
  if (typeof value !== "string" || !value.includes("pydantic_ai")) return null;
  let outcome;
  try {
    const parsed = JSON.parse(value);
    outcome = parsed && parsed.pydantic_ai && parsed.pydantic_ai.outcome;
  } catch {
    return null; // a provider's opaque value, not pydantic-ai's record
  }
  return Object.hasOwn(LABELS, outcome) ? LABELS[outcome] : null;
}
