// The client under test for the suite's `auth/*` client scenarios: switchyard itself. This
// driver only plays the MCP client on switchyard's stdio; the sign-in is switchyard's.
//
//   SWITCHYARD=/path/to/switchyard node oauth-client.mjs URL
//
// It writes a config for URL (with the scenario's pre-registered client, if it gives one, and a
// Client ID Metadata Document URL), starts `switchyard run --config FILE` with a browser command
// that only follows redirects (curl), then sends the calls of the scenario's protocol era:
// initialize, tools/list and a call of the first tool (2025-11-25), or the same requests with
// per-request `_meta` (2026-07-28). Exit 0 when every call was answered with a result.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const url = process.argv[process.argv.length - 1];
const bin = process.env.SWITCHYARD;
if (!bin || !url) {
  process.stderr.write("usage: SWITCHYARD=BIN node oauth-client.mjs URL\n");
  process.exit(2);
}
const version = process.env.MCP_CONFORMANCE_PROTOCOL_VERSION || "2025-11-25";
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || "{}");
const modern = version >= "2026";

const dir = mkdtempSync(join(tmpdir(), "switchyard-oauth-"));
const toml = (s) => JSON.stringify(s);
let config = `[server]\nname = "conformance"\nurl = ${toml(url)}\n[server.oauth]\nlogin_timeout_ms = 20000\n`;
config += `client_metadata_url = "https://conformance-test.local/client-metadata.json"\n`;
const env = { ...process.env, XDG_STATE_HOME: join(dir, "state"), BROWSER: "curl -sL -o /dev/null" };
if (context.client_id) {
  config += `client_id = ${toml(context.client_id)}\n`;
  if (context.client_secret) {
    config += `client_secret = "\${CONFORMANCE_CLIENT_SECRET}"\n`;
    env.CONFORMANCE_CLIENT_SECRET = context.client_secret;
  }
}
writeFileSync(join(dir, "switchyard.toml"), config);

const child = spawn(bin, ["run", "--config", join(dir, "switchyard.toml"), "--log-level", "info"], {
  env,
  stdio: ["pipe", "pipe", "inherit"],
});
let buffered = "";
const waiting = new Map();
child.stdout.on("data", (chunk) => {
  buffered += chunk.toString();
  let nl;
  while ((nl = buffered.indexOf("\n")) >= 0) {
    const line = buffered.slice(0, nl);
    buffered = buffered.slice(nl + 1);
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      continue;
    }
    if (msg.id !== undefined && waiting.has(msg.id)) {
      waiting.get(msg.id)(msg);
      waiting.delete(msg.id);
    }
  }
});

let next = 1;
const meta = {
  "io.modelcontextprotocol/protocolVersion": version,
  "io.modelcontextprotocol/clientInfo": { name: "switchyard-conformance-driver", version: "1.0.0" },
  "io.modelcontextprotocol/clientCapabilities": {},
};
function request(method, params = {}) {
  const id = next++;
  const body = modern ? { ...params, _meta: { ...meta, ...params._meta } } : params;
  child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params: body }) + "\n");
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${method}: no answer in 25 s`)), 25000);
    waiting.set(id, (msg) => {
      clearTimeout(timer);
      if (msg.error) reject(new Error(`${method}: ${msg.error.message}`));
      else resolve(msg.result);
    });
  });
}

let code = 0;
try {
  if (!modern) {
    await request("initialize", {
      protocolVersion: version,
      capabilities: {},
      clientInfo: { name: "switchyard-conformance-driver", version: "1.0.0" },
    });
    child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
  }
  const listed = await request("tools/list");
  const tool = listed.tools?.[0]?.name;
  if (tool) await request("tools/call", { name: tool, arguments: {} });
} catch (e) {
  process.stderr.write(`driver: ${e.message}\n`);
  code = 1;
}
child.stdin.end();
const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
child.on("exit", () => {
  clearTimeout(timer);
  rmSync(dir, { recursive: true, force: true });
  process.exit(code);
});
