// The TypeScript SDK's client (tests/npm, pinned) as a line-driven peer for the `silent` section
// of crates/switchyard/benches/router.rs.
//
//     node sdk-client.mjs SDK_DIR URL
//
// SDK_DIR is the @modelcontextprotocol/sdk package directory. Connects to URL with the SDK's
// StreamableHTTPClientTransport and its defaults (the 60 s request timeout, its reconnection
// options), prints {"ready": true}, then takes one JSON-RPC `tools/call` request per line on
// stdin and runs each as it comes, printing for each {"id": N, "result": ...} or
// {"id": N, "error": {"code", "message"}}.

import { createInterface } from "node:readline";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, url] = process.argv.slice(2);
const load = (file) => import(pathToFileURL(join(sdkDir, "dist/esm/client", file)).href);
const { Client } = await load("index.js");
const { StreamableHTTPClientTransport } = await load("streamableHttp.js");

const emit = (message) => process.stdout.write(JSON.stringify(message) + "\n");

const client = new Client({ name: "switchyard-bench", version: "0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
emit({ ready: true });

createInterface({ input: process.stdin }).on("line", (line) => {
  const { id, params } = JSON.parse(line);
  client.callTool({ name: params.name, arguments: params.arguments ?? {} }).then(
    (result) => emit({ id, result }),
    (e) => emit({ id, error: { code: e.code, message: String(e.message ?? e) } }),
  );
});
