// A real MCP client (the official TypeScript SDK) with the capabilities and roots it is given:
// for the tests of what one server shows clients that differ (tests/e2e/interop/profiles.rs).
//
//   node profiles.mjs [--caps roots,sampling,elicitation] [--roots DIR,...] [--hold-ms N] [--settle-ms N]
//                     [--call TOOL [--args JSON]]... -- <command> [args...]
//
// It connects to the command over stdio (its environment passed on), lists the tools, makes
// each call in turn, waits --hold-ms (so clients overlap), and prints one JSON object on stdout:
// {"tools": [names], "calls": [{"tool", "text"} | {"tool", "error"}]}. Exit status 2 on usage
// or connection errors.

import path from "node:path";
import { pathToFileURL } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

export const SAMPLING_REPLY = "switchyard sampled reply";

function usage(msg) {
  process.stderr.write(`profiles.mjs: ${msg}\n`);
  process.exit(2);
}

const argv = process.argv.slice(2);
const dash = argv.indexOf("--");
if (dash < 0 || dash === argv.length - 1) usage("missing `-- <command> [args...]`");
const [command, ...commandArgs] = argv.slice(dash + 1);
const opts = argv.slice(0, dash);
let caps = [];
let roots = [];
let holdMs = 0;
// Before the calls: server-filesystem applies the roots it is given asynchronously, so a call
// sent right after the handshake can find none yet, through switchyard or directly.
let settleMs = 0;
const calls = [];
for (let i = 0; i < opts.length; i += 2) {
  const [flag, value] = [opts[i], opts[i + 1]];
  if (value === undefined) usage(`${flag} needs a value`);
  if (flag === "--caps") caps = value.split(",").filter(Boolean);
  else if (flag === "--roots") roots = value.split(",").filter(Boolean);
  else if (flag === "--hold-ms") holdMs = Number(value);
  else if (flag === "--settle-ms") settleMs = Number(value);
  else if (flag === "--call") calls.push({ tool: value, args: {} });
  else if (flag === "--args") {
    if (!calls.length) usage("--args before --call");
    calls[calls.length - 1].args = JSON.parse(value);
  } else usage(`unknown option ${flag}`);
}

const capabilities = {};
for (const c of caps) {
  if (c === "roots") capabilities.roots = { listChanged: true };
  else if (c === "sampling") capabilities.sampling = {};
  else if (c === "elicitation") capabilities.elicitation = {};
  else usage(`unknown capability ${c}`);
}
const client = new Client({ name: "switchyard-profiles", version: "1.0.0" }, { capabilities });
if (capabilities.roots) {
  const list = roots.map((d) => ({ uri: pathToFileURL(path.resolve(d)).href, name: path.basename(d) }));
  client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: list }));
}
if (capabilities.sampling) {
  client.setRequestHandler(CreateMessageRequestSchema, async () => ({
    model: "switchyard-test-model",
    role: "assistant",
    content: { type: "text", text: SAMPLING_REPLY },
    stopReason: "endTurn",
  }));
}
if (capabilities.elicitation) {
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "decline" }));
}

const transport = new StdioClientTransport({ command, args: commandArgs, env: process.env, stderr: "inherit" });
try {
  await client.connect(transport);
} catch (e) {
  process.stderr.write(`profiles.mjs: could not connect: ${e}\n`);
  process.exit(2);
}
const out = { tools: [], calls: [] };
try {
  out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
} catch (e) {
  out.toolsError = String(e);
}
if (settleMs > 0) await new Promise((r) => setTimeout(r, settleMs));
for (const { tool, args } of calls) {
  try {
    const r = await client.callTool({ name: tool, arguments: args }, undefined, { timeout: 60000 });
    const text = (r.content || []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
    out.calls.push(r.isError ? { tool, error: text } : { tool, text });
  } catch (e) {
    out.calls.push({ tool, error: String(e) });
  }
}
if (holdMs > 0) await new Promise((r) => setTimeout(r, holdMs));
process.stdout.write(JSON.stringify(out) + "\n");
await client.close();
