// An MCP server (stdio, JSON lines) that lists the tools of a JSON file and answers a call of
// any of them with "NAME ran": what tests/search/measure.mjs puts switchyard in front of.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";

const tools = JSON.parse(readFileSync(process.argv[2], "utf8"));
const send = (m) => process.stdout.write(JSON.stringify(m) + "\n");
createInterface({ input: process.stdin }).on("line", (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined) return;
  const ok = (result) => send({ jsonrpc: "2.0", id: m.id, result });
  switch (m.method) {
    case "initialize":
      return ok({
        protocolVersion: m.params.protocolVersion,
        capabilities: { tools: {} },
        serverInfo: { name: "list-server", version: "1" },
      });
    case "tools/list":
      return ok({ tools });
    case "tools/call": {
      const name = m.params.name;
      if (!tools.some((t) => t.name === name)) {
        return send({ jsonrpc: "2.0", id: m.id, error: { code: -32602, message: `Unknown tool: ${name}` } });
      }
      return ok({ content: [{ type: "text", text: `${name} ran` }], isError: false });
    }
    case "ping":
      return ok({});
    default:
      return send({ jsonrpc: "2.0", id: m.id, error: { code: -32601, message: `Method not found: ${m.method}` } });
  }
});
