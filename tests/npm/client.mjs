// A real MCP client (the official TypeScript SDK's Client + StdioClientTransport) that drives a
// server through one scenario and prints ONE normalised JSON transcript on stdout.
//
//   node client.mjs <everything|filesystem|fixture-cancel> -- <command> [args...]
//   node client.mjs <everything|fixture-cancel> --url <url> --transport <streamable-http|sse> [--header 'K: V']...
//
// The second form connects to a remote server directly (Streamable HTTP, or legacy SSE; <url> is
// the /mcp or /sse endpoint), for the tests that compare it with `switchyard run --url`.
//
// switchyard's end-to-end tests (tests/e2e/npm.rs) run each scenario twice: directly against the
// server, and with `switchyard run --` in front of it, and require identical transcripts. So the
// transcript records only what is deterministic for a given server build: anything that depends
// on the clock, randomness or scheduling is normalised or reduced to a fact ("arrived", "count").
//
// Every step is recorded even when it fails (as {"error": ...}), so a broken router shows up as a
// readable transcript diff rather than as a crash. Exit status: 0 when every step succeeded,
// 1 when a step failed (transcript still printed), 2 on usage or connection errors.

import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
  CreateTaskResultSchema,
  GetTaskResultSchema,
  GetTaskPayloadResultSchema,
  ListTasksResultSchema,
  RELATED_TASK_META_KEY,
} from "@modelcontextprotocol/sdk/types.js";

// ---------------------------------------------------------------------------------------------
// Fixed answers the client gives to server->client requests. The tests look for these strings in
// tool results to prove the request really travelled server -> router -> client -> back.
export const SAMPLING_REPLY = "switchyard sampled reply";
const SAMPLING_RESULT = {
  model: "switchyard-test-model",
  role: "assistant",
  content: { type: "text", text: SAMPLING_REPLY },
  stopReason: "endTurn",
};
const ELICITATION_CONTENT = {
  name: "Switchyard Tester",
  check: true,
  email: "tester@example.com",
  integer: 7,
  number: 2.5,
};

// ---------------------------------------------------------------------------------------------
// Argument parsing.
function usage(msg) {
  process.stderr.write(
    `client.mjs: ${msg}\nusage: node client.mjs <everything|filesystem|fixture-cancel> -- <command> [args...]\n` +
      `       node client.mjs <everything|fixture-cancel> --url <url> --transport <streamable-http|sse> [--header 'K: V']...\n`,
  );
  process.exit(2);
}
const argv = process.argv.slice(2);
const scenarioName = argv[0];
if (!scenarioName) usage("missing scenario");
// Either a server command after `--`, or a remote server's URL and transport.
let command = null;
let commandArgs = [];
let remote = null;
if (argv[1] === "--") {
  [command, ...commandArgs] = argv.slice(2);
  if (!command) usage("missing server command after `--`");
} else if (argv[1] === "--url" && argv[3] === "--transport" && argv.length >= 5 && argv.length % 2 === 1) {
  if (!["streamable-http", "sse"].includes(argv[4])) usage(`unknown transport ${argv[4]}`);
  // Each `--header 'Name: value'` is sent on every request (e.g. the bearer token of a router).
  const headers = {};
  for (let i = 5; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    const colon = value.indexOf(":");
    if (flag !== "--header" || colon < 1) usage(`expected --header 'Name: value', got ${flag} ${value}`);
    headers[value.slice(0, colon).trim()] = value.slice(colon + 1).trim();
  }
  remote = { url: new URL(argv[2]), transport: argv[4], headers };
} else {
  usage("expected `-- <command>` or `--url <url> --transport <streamable-http|sse>` after the scenario");
}

// A watchdog so a hung router can never hang the test binary: fail loudly instead.
const WATCHDOG_MS = Number(process.env.SWITCHYARD_CLIENT_TIMEOUT_MS || 90_000);
const watchdog = setTimeout(() => {
  process.stderr.write(`client.mjs: scenario ${scenarioName} did not finish within ${WATCHDOG_MS} ms\n`);
  process.exit(3);
}, WATCHDOG_MS);

// ---------------------------------------------------------------------------------------------
// Helpers.
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Everything the server sends us (notifications and requests), in arrival order, so steps can wait
// for "a message like X since point Y" without racing against the handlers.
const inbox = [];
const inboxWaiters = new Set();
function deliver(entry) {
  inbox.push(entry);
  for (const w of [...inboxWaiters]) w();
}
// Waits until pred matches an inbox entry at index >= from; resolves to the entry or null on timeout.
function waitFor(pred, { from = 0, timeoutMs = 8000 } = {}) {
  return new Promise((resolve) => {
    const check = () => {
      for (let i = from; i < inbox.length; i++) {
        if (pred(inbox[i])) {
          cleanup();
          resolve(inbox[i]);
          return true;
        }
      }
      return false;
    };
    const timer = setTimeout(() => {
      cleanup();
      resolve(null);
    }, timeoutMs);
    const cleanup = () => {
      clearTimeout(timer);
      inboxWaiters.delete(check);
    };
    if (!check()) inboxWaiters.add(check);
  });
}
const logs = (from = 0) => inbox.slice(from).filter((e) => e.kind === "log");

const LOG_LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];
const levelAtLeast = (level, min) => LOG_LEVELS.indexOf(level) >= LOG_LEVELS.indexOf(min);

// Replace every occurrence of the given literal strings inside all string values (deeply).
function replaceDeep(value, pairs) {
  if (typeof value === "string") {
    let s = value;
    for (const [from, to] of pairs) if (from) s = s.split(from).join(to);
    return s;
  }
  if (Array.isArray(value)) return value.map((v) => replaceDeep(v, pairs));
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = replaceDeep(v, pairs);
    return out;
  }
  return value;
}
// Apply fn to every string value (deeply).
function mapStrings(value, fn) {
  if (typeof value === "string") return fn(value);
  if (Array.isArray(value)) return value.map((v) => mapStrings(v, fn));
  if (value && typeof value === "object") {
    const out = {};
    for (const [k, v] of Object.entries(value)) out[k] = mapStrings(v, fn);
    return out;
  }
  return value;
}
// Wall-clock times that servers embed in text ("created at 10:42:17 AM").
const stripClock = (s) => s.replace(/\b\d{1,2}:\d{2}:\d{2}(\s?[AP]M)?/g, "<time>");

function errorRecord(e) {
  return { error: { code: e?.code ?? null, message: String(e?.message ?? e) } };
}

const transcript = { scenario: scenarioName, steps: {} };
let failedSteps = 0;
// Runs one step and records its (normalised) result or its error under transcript.steps[name].
async function step(name, fn) {
  try {
    transcript.steps[name] = await fn();
  } catch (e) {
    failedSteps++;
    transcript.steps[name] = errorRecord(e);
    process.stderr.write(`client.mjs: step ${name} failed: ${e?.stack ?? e}\n`);
  }
}

// ---------------------------------------------------------------------------------------------
// The client.
let roots = [];
const serverRequests = []; // method names of server->client requests, in arrival order

const client = new Client(
  { name: "switchyard-npm-e2e", version: "1.0.0" },
  {
    capabilities: {
      sampling: {},
      elicitation: {},
      roots: { listChanged: true },
    },
  },
);

client.setRequestHandler(CreateMessageRequestSchema, async (req) => {
  serverRequests.push(req.method);
  deliver({ kind: "request", method: req.method, params: req.params });
  return SAMPLING_RESULT;
});
client.setRequestHandler(ElicitRequestSchema, async (req) => {
  serverRequests.push(req.method);
  deliver({ kind: "request", method: req.method, params: req.params });
  return { action: "accept", content: ELICITATION_CONTENT };
});
client.setRequestHandler(ListRootsRequestSchema, async (req) => {
  serverRequests.push(req.method);
  deliver({ kind: "request", method: req.method, params: req.params ?? null });
  return { roots };
});
client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
  deliver({ kind: "log", level: n.params.level, logger: n.params.logger ?? null, data: n.params.data });
});
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
  deliver({ kind: "updated", uri: n.params.uri });
});
client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
  deliver({ kind: "tools_list_changed" });
});
// Stray messages (e.g. progress for a call we already cancelled) land here; they are expected
// after a cancellation, so they are only reported on stderr.
client.onerror = (e) => process.stderr.write(`client.mjs: protocol note: ${e?.message ?? e}\n`);

const transport = remote
  ? remote.transport === "sse"
    ? new SSEClientTransport(remote.url, { requestInit: { headers: remote.headers } })
    : new StreamableHTTPClientTransport(remote.url, { requestInit: { headers: remote.headers } })
  : new StdioClientTransport({
      command,
      args: commandArgs,
      // The SDK passes only a minimal environment by default; pass ours so RUST_LOG etc. reach the
      // router. The child's stderr goes to ours, so the test sees router/server logs on failure.
      env: { ...process.env },
      stderr: "inherit",
    });

// Tap the raw messages in both directions. Two reasons: the SDK keeps the negotiated protocol
// version and the full initialize result to itself; and the SDK dispatches notifications on a
// microtask but responses synchronously, so when a progress notification and the response that
// follows it arrive in one read chunk, the SDK drops that progress as "unknown token". Whether
// they share a chunk depends on timing (and differs behind a router), so progress is counted
// here, in wire order, where it is deterministic.
let initializeResult = null;
const wire = []; // {dir: "in"|"out", msg}
{
  let inner;
  Object.defineProperty(transport, "onmessage", {
    configurable: true,
    get() {
      return (
        inner &&
        ((message, extra) => {
          if (initializeResult === null && message && message.id !== undefined && message.result?.protocolVersion) {
            initializeResult = message.result;
          }
          wire.push({ dir: "in", msg: message });
          return inner(message, extra);
        })
      );
    },
    set(f) {
      inner = f;
    },
  });
  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    wire.push({ dir: "out", msg: message });
    return send(message, options);
  };
}
// Progress notifications on the wire for the tools/call of `toolName` sent after wire index
// `mark`, up to its response.
function wireProgress(mark, toolName) {
  const req = wire
    .slice(mark)
    .find((w) => w.dir === "out" && w.msg.method === "tools/call" && w.msg.params?.name === toolName);
  if (!req) return { request: null, progress: [], responseSeen: false };
  const token = req.msg.params?._meta?.progressToken;
  const progress = [];
  let responseSeen = false;
  for (const w of wire.slice(mark)) {
    if (w.dir !== "in") continue;
    if (w.msg.id === req.msg.id && w.msg.method === undefined) {
      responseSeen = true;
      break;
    }
    if (w.msg.method === "notifications/progress" && w.msg.params?.progressToken === token) {
      progress.push({ progress: w.msg.params.progress, total: w.msg.params.total ?? null });
    }
  }
  return { token, progress, responseSeen };
}

// Records a tool result; `norm` post-processes it (per-scenario normalisation).
async function call(name, args = {}, options = undefined) {
  return client.callTool({ name, arguments: args }, undefined, options);
}

// ---------------------------------------------------------------------------------------------
// What the client learnt from initialize, for both scenarios.
function initializeSummary() {
  return {
    protocolVersion: initializeResult?.protocolVersion ?? null,
    serverInfo: client.getServerVersion(),
    capabilities: client.getServerCapabilities(),
    instructions: client.getInstructions() ?? null,
  };
}

// Scenario: @modelcontextprotocol/server-everything.
async function everything() {
  roots = [{ uri: "file:///switchyard/project-a", name: "Project A" }];
  const S = transcript.steps;

  await step("initialize", async () => initializeSummary());

  // server-everything asks for roots/list 350 ms after `initialized` and logs the outcome.
  await step("roots_initial_sync", async () => {
    const log = await waitFor((e) => e.kind === "log" && /^Roots updated/.test(String(e.data)));
    return { serverAskedForRoots: serverRequests.includes("roots/list"), log: log && log.data };
  });

  await step("ping", async () => client.ping());

  await step("tools_list", async () => {
    const r = await client.listTools();
    return { tools: r.tools, hasNextCursor: r.nextCursor !== undefined };
  });

  await step("prompts_list", async () => client.listPrompts());
  await step("prompts_get_simple", async () => client.getPrompt({ name: "simple-prompt" }));
  await step("prompts_get_args", async () =>
    client.getPrompt({ name: "args-prompt", arguments: { city: "Lisbon", state: "Lisboa" } }),
  );
  await step("completion", async () =>
    client.complete({
      ref: { type: "ref/prompt", name: "completable-prompt" },
      argument: { name: "department", value: "E" },
    }),
  );

  await step("resources_list_first_page", async () => {
    const r = await client.listResources();
    return { resources: r.resources, hasNextCursor: r.nextCursor !== undefined };
  });
  await step("resource_templates_list", async () => client.listResourceTemplates());
  await step("resources_read_static", async () =>
    client.readResource({ uri: "demo://resource/static/document/instructions.md" }),
  );
  // The dynamic resources embed the wall clock time.
  await step("resources_read_dynamic_text", async () =>
    mapStrings(await client.readResource({ uri: "demo://resource/dynamic/text/1" }), stripClock),
  );
  await step("resources_read_dynamic_blob", async () => {
    const r = await client.readResource({ uri: "demo://resource/dynamic/blob/2" });
    return {
      contents: r.contents.map((c) => ({
        ...c,
        blob: undefined,
        blobDecoded: stripClock(Buffer.from(c.blob, "base64").toString("utf8")),
      })),
    };
  });

  await step("call_echo", async () => call("echo", { message: "hello through switchyard" }));
  await step("call_get_sum", async () => call("get-sum", { a: 2, b: 40 }));
  await step("call_structured_content", async () => call("get-structured-content", { location: "Chicago" }));
  await step("call_tiny_image", async () => call("get-tiny-image"));
  await step("call_annotated_message", async () =>
    call("get-annotated-message", { messageType: "error", includeImage: true }),
  );
  await step("call_resource_reference", async () =>
    mapStrings(await call("get-resource-reference", { resourceType: "Text", resourceId: 3 }), stripClock),
  );
  await step("call_unknown_tool", async () => {
    try {
      return { result: await call("no-such-tool") };
    } catch (e) {
      return errorRecord(e);
    }
  });

  // Progress: 5 steps over 1 s; the SDK attaches a progressToken because onprogress is given.
  await step("progress", async () => {
    const mark = wire.length;
    let callbacks = 0;
    const result = await call(
      "trigger-long-running-operation",
      { duration: 1, steps: 5 },
      { onprogress: () => callbacks++ },
    );
    const { progress, responseSeen } = wireProgress(mark, "trigger-long-running-operation");
    const monotonic = progress.every((p, i) => i === 0 || p.progress > progress[i - 1].progress);
    return {
      result,
      countBeforeResponse: progress.length,
      monotonic,
      notifications: progress,
      responseSeen,
      sdkCallbackFired: callbacks > 0,
    };
  });

  await step("sampling", async () => {
    const mark = inbox.length;
    const result = await call("trigger-sampling-request", { prompt: "Say hello", maxTokens: 32 });
    const req = inbox.slice(mark).find((e) => e.kind === "request" && e.method === "sampling/createMessage");
    return { requestSeenByClient: req ? req.params : null, result };
  });

  await step("elicitation", async () => {
    const mark = inbox.length;
    const result = await call("trigger-elicitation-request");
    const req = inbox.slice(mark).find((e) => e.kind === "request" && e.method === "elicitation/create");
    return {
      requestSeenByClient: req
        ? { message: req.params.message, fields: Object.keys(req.params.requestedSchema?.properties ?? {}) }
        : null,
      result,
    };
  });

  // Roots: what the server learnt at start, then a change announced with roots/list_changed.
  await step("roots", async () => {
    const before = await call("get-roots-list");
    const mark = inbox.length;
    roots = [...roots, { uri: "file:///switchyard/project-b", name: "Project B" }];
    await client.sendRootsListChanged();
    const reRequested = await waitFor((e) => e.kind === "request" && e.method === "roots/list", { from: mark });
    const log = await waitFor((e) => e.kind === "log" && /^Roots updated: 2/.test(String(e.data)), { from: mark });
    const after = await call("get-roots-list");
    return { before, serverReRequestedRoots: reRequested !== null, log: log && log.data, after };
  });

  // Logging. (a) At "debug" every message passes: the simulated logger emits one random-level
  // message at once. Its level is random, so only the fact of arrival is recorded.
  await step("logging_debug", async () => {
    await client.setLoggingLevel("debug");
    const mark = inbox.length;
    const on = await call("toggle-simulated-logging");
    const got = await waitFor((e) => e.kind === "log" && /level[- ]message/i.test(String(e.data)), { from: mark });
    const off = await call("toggle-simulated-logging");
    return {
      toggledOn: on,
      simulatedLogArrived: got !== null,
      simulatedLogLevelValid: got !== null && LOG_LEVELS.includes(got.level),
      toggledOff: off,
    };
  });

  // (b) At "error" the server's info-level acknowledgement of a subscribe must not arrive. The
  // server sends that log before the subscribe response, so once the response is here the log
  // would have been here too.
  const uriA = "demo://resource/static/document/features.md";
  const uriB = "demo://resource/static/document/architecture.md";
  await step("logging_error_suppresses_info", async () => {
    await client.setLoggingLevel("error");
    const mark = inbox.length;
    const r = await client.subscribeResource({ uri: uriA });
    await call("echo", { message: "barrier" }); // one more round trip for good measure
    const below = logs(mark).filter((l) => !levelAtLeast(l.level, "error"));
    return { subscribeResult: r, logsBelowErrorLevel: below.length };
  });

  // (c) At "info" the same acknowledgement arrives.
  await step("logging_info_delivers", async () => {
    await client.setLoggingLevel("info");
    const mark = inbox.length;
    const r = await client.subscribeResource({ uri: uriB });
    const log = await waitFor((e) => e.kind === "log" && String(e.data).includes(uriB), { from: mark });
    return { subscribeResult: r, log: log && { level: log.level, data: log.data.trim() } };
  });

  // Subscriptions: the subscriber-updates simulator notifies every subscribed URI at once.
  await step("resource_updates", async () => {
    const mark = inbox.length;
    const on = await call("toggle-subscriber-updates");
    const a = await waitFor((e) => e.kind === "updated" && e.uri === uriA, { from: mark });
    const b = await waitFor((e) => e.kind === "updated" && e.uri === uriB, { from: mark });
    const off = await call("toggle-subscriber-updates");
    const unsub = await client.unsubscribeResource({ uri: uriA });
    return { toggledOn: on, updated: [a && a.uri, b && b.uri], toggledOff: off, unsubscribeResult: unsub };
  });

  // Cancellation: abort a 10 s operation after 300 ms; the call must reject promptly and the
  // session must keep working.
  await step("cancellation", async () => {
    const controller = new AbortController();
    const started = Date.now();
    const p = call(
      "trigger-long-running-operation",
      { duration: 10, steps: 10 },
      { signal: controller.signal, onprogress: () => {} },
    );
    setTimeout(() => controller.abort("switchyard-test-abort"), 300);
    let outcome;
    try {
      outcome = { resolved: await p };
    } catch (e) {
      outcome = { rejected: true, ...errorRecord(e) };
    }
    const elapsed = Date.now() - started;
    const after = await call("echo", { message: "still alive after cancel" });
    return { outcome, endedWithin2s: elapsed < 2000, echoAfterCancel: after };
  });

  await step("ping_final", async () => client.ping());

  // Facts about notifications that are not tied to one step.
  transcript.notifications = {
    // server-everything registers capability-dependent tools after `initialized`.
    toolsListChangedSeen: inbox.some((e) => e.kind === "tools_list_changed"),
  };
  void S;
}

// ---------------------------------------------------------------------------------------------
// Scenario: @modelcontextprotocol/server-filesystem, started on a temp dir (the last argument of
// the server command). The client offers <dir>/ws as its only root, which replaces the server's
// command-line directory, so the scenario also proves that roots/list reached the client.
async function filesystem() {
  const given = commandArgs[commandArgs.length - 1];
  if (!given || !fs.existsSync(given)) throw new Error(`filesystem: last server argument must be an existing dir, got ${given}`);
  const real = fs.realpathSync(given);
  const ws = path.join(real, "ws");
  const extra = path.join(real, "extra");
  fs.mkdirSync(ws, { recursive: true });
  fs.mkdirSync(extra, { recursive: true });
  roots = [{ uri: pathToFileURL(ws).href, name: "workspace" }];
  const P = (...p) => path.join(ws, ...p);

  // Paths differ between runs; file times are the clock.
  const norm = (v) =>
    mapStrings(replaceDeep(v, [[real, "<ROOT>"], [given, "<ROOT>"]]), (s) =>
      s.replace(/^(created|modified|accessed): .*$/gm, "$1: <time>"),
    );
  const sortLines = (r) => ({
    ...r,
    content: r.content.map((c) => (c.type === "text" ? { ...c, text: c.text.split("\n").sort().join("\n") } : c)),
    structuredContent: r.structuredContent?.content
      ? { content: r.structuredContent.content.split("\n").sort().join("\n") }
      : r.structuredContent,
  });
  // The server applies roots asynchronously after `initialized`; poll until they are in effect.
  const allowedUntil = async (pred) => {
    const deadline = Date.now() + 8000;
    let r;
    while (Date.now() < deadline) {
      r = await call("list_allowed_directories");
      if (pred(r.structuredContent?.content ?? "")) return { settled: true, result: r };
      await sleep(50);
    }
    return { settled: false, result: r };
  };
  const fstep = (name, fn) => step(name, async () => norm(await fn()));

  await fstep("initialize", async () => initializeSummary());
  await fstep("roots_initial", async () => {
    const asked = await waitFor((e) => e.kind === "request" && e.method === "roots/list");
    const r = await allowedUntil((t) => t.includes(ws) && !t.split("\n").includes(real));
    return { serverAskedForRoots: asked !== null, ...r };
  });
  await fstep("ping", async () => client.ping());
  await fstep("tools_list", async () => client.listTools());

  await fstep("write_file", async () => call("write_file", { path: P("a.txt"), content: "hello\nworld\n" }));
  await fstep("read_text_file", async () => call("read_text_file", { path: P("a.txt") }));
  await fstep("read_text_file_head", async () => call("read_text_file", { path: P("a.txt"), head: 1 }));
  await fstep("read_file_deprecated", async () => call("read_file", { path: P("a.txt") }));
  await fstep("create_directory", async () => call("create_directory", { path: P("sub") }));
  await fstep("write_file_2", async () => call("write_file", { path: P("sub", "b.md"), content: "# b\n" }));
  await fstep("list_directory", async () => sortLines(await call("list_directory", { path: ws })));
  await fstep("list_directory_with_sizes", async () => call("list_directory_with_sizes", { path: ws }));
  await fstep("directory_tree", async () => call("directory_tree", { path: ws }));
  await fstep("edit_file_dry_run", async () =>
    call("edit_file", { path: P("a.txt"), edits: [{ oldText: "world", newText: "switchyard" }], dryRun: true }),
  );
  await fstep("edit_file", async () =>
    call("edit_file", { path: P("a.txt"), edits: [{ oldText: "world", newText: "switchyard" }] }),
  );
  await fstep("read_after_edit", async () => call("read_text_file", { path: P("a.txt") }));
  await fstep("move_file", async () => call("move_file", { source: P("a.txt"), destination: P("sub", "c.txt") }));
  await fstep("get_file_info", async () => call("get_file_info", { path: P("sub", "c.txt") }));
  await fstep("search_files", async () => sortLines(await call("search_files", { path: ws, pattern: "**/*.txt" })));
  await fstep("read_multiple_files", async () =>
    call("read_multiple_files", { paths: [P("sub", "c.txt"), P("sub", "b.md"), P("missing.txt")] }),
  );
  await fstep("read_missing_file", async () => call("read_text_file", { path: P("missing.txt") }));
  // Outside the roots: the command-line dir was replaced by the client's root, so this is denied.
  await fstep("write_outside_roots", async () => call("write_file", { path: path.join(extra, "x.txt"), content: "x" }));
  await fstep("list_allowed_directories", async () => call("list_allowed_directories"));

  // A roots change: the server re-asks for roots/list and then allows both directories.
  await fstep("roots_changed", async () => {
    const mark = inbox.length;
    roots = [...roots, { uri: pathToFileURL(extra).href, name: "extra" }];
    await client.sendRootsListChanged();
    const asked = await waitFor((e) => e.kind === "request" && e.method === "roots/list", { from: mark });
    const r = await allowedUntil((t) => t.includes(ws) && t.includes(extra));
    const write = await call("write_file", { path: path.join(extra, "x.txt"), content: "x" });
    return { serverReRequestedRoots: asked !== null, ...r, writeInNewRoot: write };
  });
}

// ---------------------------------------------------------------------------------------------
// Scenario: switchyard's own fixture server (its `sleep` tool) for the cancellation check that
// needs the server's view: the test compares the fixture's journal with what happened here.
async function fixtureCancel() {
  await step("initialize", async () => ({
    protocolVersion: initializeResult?.protocolVersion ?? null,
    serverInfo: client.getServerVersion(),
  }));
  await step("cancellation", async () => {
    const controller = new AbortController();
    const started = Date.now();
    const p = call("sleep", { ms: 5000 }, { signal: controller.signal });
    setTimeout(() => controller.abort("switchyard-test-abort"), 300);
    let outcome;
    try {
      outcome = { resolved: await p };
    } catch (e) {
      outcome = { rejected: true, ...errorRecord(e) };
    }
    const elapsed = Date.now() - started;
    return { outcome, endedWithin2s: elapsed < 2000 };
  });
  await step("echo_after_cancel", async () => call("echo", { text: "still alive after cancel" }));
}

// ---------------------------------------------------------------------------------------------
// Scenario: server-everything's task tool (2025-11-25 Tasks). Six tasks are created at once (so a
// router's pool spreads them over its instances), each is polled with tasks/get until it is
// terminal, its result is fetched with tasks/result, and tasks/list must list all six. A task id
// nobody handed out must be refused as unknown (-32602). Task ids are opaque and differ behind a
// router, so the transcript records facts about them, never the ids themselves.
const TASK_TOPICS = ["rivers", "bridges", "comets", "glaciers", "looms", "orchards"];
async function tasks() {
  await step("initialize", async () => ({ serverInfo: client.getServerVersion() }));
  let created = [];
  await step("create", async () => {
    created = await Promise.all(
      TASK_TOPICS.map((topic) =>
        client.request(
          {
            method: "tools/call",
            params: { name: "simulate-research-query", arguments: { topic }, task: { ttl: 120000 } },
          },
          CreateTaskResultSchema,
        ),
      ),
    );
    const ids = created.map((c) => c.task.taskId);
    return { count: created.length, distinct: new Set(ids).size, statuses: created.map((c) => c.task.status) };
  });
  await step("poll", async () => {
    // Each task's status once it stopped changing (how many polls that took depends on timing).
    return await Promise.all(
      created.map(async (c) => {
        const { taskId } = c.task;
        for (let i = 0; i < 60; i++) {
          const t = await client.request({ method: "tasks/get", params: { taskId } }, GetTaskResultSchema);
          if (t.taskId !== taskId) return { wrongId: t.taskId };
          if (["completed", "failed", "cancelled"].includes(t.status)) return t.status;
          await sleep(c.task.pollInterval ?? 500);
        }
        return "still working after 60 polls";
      }),
    );
  });
  await step("results", async () => {
    return await Promise.all(
      created.map(async (c, i) => {
        const { taskId } = c.task;
        const r = await client.request({ method: "tasks/result", params: { taskId } }, GetTaskPayloadResultSchema);
        const text = (r.content ?? []).map((x) => x.text ?? "").join("");
        return {
          report: text.includes(`# Research Report: ${TASK_TOPICS[i]}`),
          relatedTaskIsOurs: r._meta?.[RELATED_TASK_META_KEY]?.taskId === taskId,
        };
      }),
    );
  });
  await step("list", async () => {
    const listed = await client.request({ method: "tasks/list", params: {} }, ListTasksResultSchema);
    const ids = new Set(listed.tasks.map((t) => t.taskId));
    return {
      allSix: created.every((c) => ids.has(c.task.taskId)),
      completed: listed.tasks.filter((t) => ids.has(t.taskId) && t.status === "completed").length,
    };
  });
  await step("unknown_task", async () => {
    try {
      await client.request({ method: "tasks/get", params: { taskId: "no-such-task" } }, GetTaskResultSchema);
      return { refused: false };
    } catch (e) {
      return { refused: true, code: e?.code ?? null };
    }
  });
}

// ---------------------------------------------------------------------------------------------
const scenarios = { everything, filesystem, "fixture-cancel": fixtureCancel, tasks };
const scenario = scenarios[scenarioName];
if (!scenario) usage(`unknown scenario ${scenarioName}`);

try {
  await client.connect(transport);
} catch (e) {
  const target = remote ? `${remote.url} (${remote.transport})` : `${command} ${commandArgs.join(" ")}`;
  process.stderr.write(`client.mjs: could not connect to ${target}: ${e?.stack ?? e}\n`);
  process.exit(2);
}
try {
  await scenario();
} catch (e) {
  failedSteps++;
  transcript.fatal = String(e?.message ?? e);
  process.stderr.write(`client.mjs: scenario ${scenarioName} aborted: ${e?.stack ?? e}\n`);
}
transcript.serverToClientRequests = [...new Set(serverRequests)].sort();

// Close (stdin EOF, then the SDK's TERM/KILL fallback) before printing, so a server or router
// that does not shut down shows up as a slow test, not as a leftover process.
await client.close().catch((e) => process.stderr.write(`client.mjs: close: ${e}\n`));
clearTimeout(watchdog);
process.stdout.write(JSON.stringify(transcript, null, 2) + "\n", () => process.exit(failedSteps ? 1 : 0));
