// Check event streams with @ag-ui/client's own verifier (verifyEvents), as HttpAgent does.
//
// Usage: node verify_streams.mjs <file.json>, the file holding a JSON list of streams, each a
// list of AG-UI events (camelCase, as decoded from the SSE frames).
// Prints one JSON document: for each stream, {"ok": true} or {"ok": false, "error": "..."}.
import { verifyEvents } from "@ag-ui/client";
import { readFileSync } from "node:fs";
import { from, lastValueFrom, toArray } from "rxjs";

const [path] = process.argv.slice(2);
if (!path) {
  console.error("usage: node verify_streams.mjs <file.json>");
  process.exit(2);
}

const streams = JSON.parse(readFileSync(path, "utf8"));
const results = [];
for (const events of streams) {
  try {
    await lastValueFrom(from(events).pipe(verifyEvents(false), toArray()));
    results.push({ ok: true });
  } catch (error) {
    results.push({ ok: false, error: String(error && error.message ? error.message : error) });
  }
}
process.stdout.write(JSON.stringify(results));
