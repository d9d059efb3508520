// Measures what search mode saves, through the daemon and a group, as a client sees it: the
// real npm servers filesystem, everything, memory and sequential-thinking (tests/npm) and a
// server of fixture tools (tests/search/tools.json) in one group, to 50 and 150 tools; the
// tokens of the tools/list the group's client receives, as it is and in search mode
// (`[groups.NAME] expose = "search"`), counted with tiktoken's o200k_base and cl100k_base
// (js-tiktoken); and, at 150 tools, whether search_tools puts each task's tool of
// tests/search/tasks.json in its top 3. Exits 1 when search mode saves less than 90% or fewer
// than 90% of the tasks find their tool.
//
//   cargo build && (cd tests/npm && npm ci --ignore-scripts) \
//     && (cd tests/search && npm ci --ignore-scripts) && node tests/search/measure.mjs
//   node tests/search/measure.mjs --capture   # first takes the real servers' tools anew into
//                                             # tools.json (the fixture tools stay)
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { getEncoding } from "js-tiktoken";

const here = dirname(fileURLToPath(import.meta.url));
const repo = resolve(here, "../..");
const bin = process.env.SWITCHYARD_BIN ?? join(repo, "target/debug/switchyard");
const work = join(repo, "target/tmp/search-measure");
mkdirSync(work, { recursive: true });
const encodings = ["o200k_base", "cl100k_base"].map((name) => [name, getEncoding(name)]);

/** A JSON-lines MCP client of a child process. */
function client(argv, env = process.env) {
  const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "pipe"], env });
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  const waiting = new Map();
  createInterface({ input: child.stdout }).on("line", (line) => {
    const m = JSON.parse(line);
    if (m.id !== undefined && waiting.has(m.id)) {
      waiting.get(m.id)(m);
      waiting.delete(m.id);
    }
  });
  let next = 1;
  const request = (method, params) =>
    new Promise((ok, fail) => {
      const id = next++;
      const timer = setTimeout(() => fail(new Error(`${method}: no answer in 30 s\n${stderr}`)), 30000);
      waiting.set(id, (m) => (clearTimeout(timer), ok(m)));
      child.stdin.write(JSON.stringify({ jsonrpc: "2.0", id, method, params }) + "\n");
    });
  const notify = (method, params) => child.stdin.write(JSON.stringify({ jsonrpc: "2.0", method, params }) + "\n");
  return { request, notify, close: () => child.kill() };
}

async function initialized(argv, name, env) {
  const c = client(argv, env);
  const init = await c.request("initialize", {
    protocolVersion: "2025-06-18",
    capabilities: {},
    clientInfo: { name, version: "1" },
  });
  if (!init.result) throw new Error(`initialize failed: ${JSON.stringify(init)}`);
  c.notify("notifications/initialized", {});
  return c;
}

/** The real npm servers: their node arguments, by the name the group gives them. */
const npm = join(repo, "tests/npm/node_modules/@modelcontextprotocol");
mkdirSync(join(work, "root"), { recursive: true });
const servers = {
  filesystem: [join(npm, "server-filesystem/dist/index.js"), join(work, "root")],
  everything: [join(npm, "server-everything/dist/index.js"), "stdio"],
  memory: [join(npm, "server-memory/dist/index.js")],
  "sequential-thinking": [join(npm, "server-sequential-thinking/dist/index.js")],
};

/** The real npm servers' tools, taken anew into tools.json (fixture tools kept). */
async function capture() {
  const file = JSON.parse(readFileSync(join(here, "tools.json"), "utf8"));
  const real = [];
  for (const [server, args] of Object.entries(servers)) {
    const c = await initialized(["node", ...args], "capture");
    const list = await c.request("tools/list", {});
    c.close();
    for (const tool of list.result.tools) real.push({ server, tool });
  }
  file.tools = real.concat(file.tools.filter((t) => !(t.server in servers)));
  writeFileSync(join(here, "tools.json"), JSON.stringify(file, null, 1) + "\n");
  console.log(`captured ${real.length} tools of ${Object.keys(servers).length} real servers`);
}

const tokens = (value) => encodings.map(([, e]) => e.encode(JSON.stringify(value)).length);

/** The daemon's config: the real servers, a fixture server per size, a group per size and mode. */
function daemonConfig(sizes) {
  const all = JSON.parse(readFileSync(join(here, "tools.json"), "utf8")).tools;
  const real = Object.keys(servers);
  const realCount = all.filter((t) => real.includes(t.server)).length;
  const fixtures = all.filter((t) => !real.includes(t.server));
  let text = "";
  for (const [name, args] of Object.entries(servers)) {
    text += `[servers.${name}]\ncommand = "node"\nargs = ${JSON.stringify(args)}\n\n`;
  }
  for (const n of sizes) {
    // The fixture tools keep their service's name in front, as the group would put it.
    const tools = fixtures.slice(0, n - realCount).map(({ server, tool }) => ({ ...tool, name: `${server}__${tool.name}` }));
    const file = join(work, `fixture-tools-${n}.json`);
    writeFileSync(file, JSON.stringify(tools));
    text += `[servers.fixtures${n}]\ncommand = "node"\nargs = ${JSON.stringify([join(here, "list_server.mjs"), file])}\n\n`;
    const members = JSON.stringify([...real, `fixtures${n}`]);
    // The fixture server's prefix is empty in effect: its tools already carry theirs.
    text += `[groups.list${n}]\nservers = ${members}\nseparator = "__"\nprefix = { fixtures${n} = "x" }\n\n`;
    text += `[groups.search${n}]\nservers = ${members}\nseparator = "__"\nprefix = { fixtures${n} = "x" }\nexpose = "search"\n\n`;
  }
  return text;
}

/** The names a task file uses for a tool the group shows as `x__server__tool`. */
const plain = (name) => name.replace(/^x__/, "");

async function measure(n, tasks, env, config) {
  const connect = (group) => [bin, "connect", "--group", group, "--config", config];
  const direct = await initialized(connect(`list${n}`), "measure", env);
  const listed = (await direct.request("tools/list", {})).result.tools;
  direct.close();
  const search = await initialized(connect(`search${n}`), "measure", env);
  const searched = (await search.request("tools/list", {})).result.tools;
  const row = { n, listed: listed.length, direct: tokens(listed), search: tokens(searched), hits: null, answer: null };
  if (tasks) {
    let hits = 0;
    const answerTokens = [0, 0];
    const missed = [];
    for (const { task, tool } of tasks) {
      const r = await search.request("tools/call", { name: "search_tools", arguments: { query: task, limit: 3 } });
      const top = r.result.structuredContent.tools.map((t) => plain(t.name));
      tokens(r.result.content).forEach((t, i) => (answerTokens[i] += t));
      if (tool.split("|").some((w) => top.includes(w))) hits++;
      else missed.push(`${task}: wanted ${tool}, got ${top.join(", ")}`);
    }
    // A real server's tool, called through search mode.
    const called = await search.request("tools/call", {
      name: "call_tool",
      arguments: { name: "memory__read_graph", arguments: {} },
    });
    if (called.result?.isError || !called.result?.content?.[0]?.text?.includes("entities")) {
      throw new Error(`call_tool did not run memory's read_graph: ${JSON.stringify(called)}`);
    }
    row.hits = [hits, tasks.length, missed];
    row.answer = answerTokens.map((t) => Math.round(t / tasks.length));
  }
  search.close();
  return row;
}

if (process.argv.includes("--capture")) await capture();
const tasks = JSON.parse(readFileSync(join(here, "tasks.json"), "utf8")).tasks;
const home = join(work, "home");
for (const sub of ["run", "state", "config"]) mkdirSync(join(home, sub), { recursive: true, mode: 0o700 });
const env = {
  ...process.env,
  HOME: home,
  XDG_RUNTIME_DIR: join(home, "run"),
  XDG_STATE_HOME: join(home, "state"),
  XDG_CONFIG_HOME: join(home, "config"),
};
const config = join(work, "switchyard.toml");
writeFileSync(config, daemonConfig([50, 150]));
let rows;
try {
  rows = [await measure(50, null, env, config), await measure(150, tasks, env, config)];
} finally {
  spawn(bin, ["stop", "--config", config], { env, stdio: "ignore" });
}
let failed = false;
console.log(`| tools | ${encodings.map(([e]) => `direct (${e})`).join(" | ")} | ${encodings.map(([e]) => `search mode (${e})`).join(" | ")} | fewer |`);
console.log(`|---|${encodings.map(() => "---|").join("")}${encodings.map(() => "---|").join("")}---|`);
for (const r of rows) {
  const fewer = 1 - r.search[0] / r.direct[0];
  failed ||= fewer < 0.9;
  console.log(`| ${r.listed} | ${r.direct.join(" | ")} | ${r.search.join(" | ")} | ${(100 * fewer).toFixed(1)}% |`);
}
const [hits, total, missed] = rows[1].hits;
console.log(`\nsearch_tools (limit 3) over ${rows[1].listed} tools: the right tool in the top 3 for ${hits} of ${total} tasks (${((100 * hits) / total).toFixed(1)}%); one answer: ${rows[1].answer.join(" / ")} tokens on average`);
for (const m of missed) console.log(`  missed: ${m}`);
failed ||= hits * 10 < total * 9;
process.exit(failed ? 1 : 0);
