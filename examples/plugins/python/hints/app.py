"""hints: overrides the annotations of matching tools and lets read-only ones run in parallel.

The Python twin of the Rust `hints` example (switchyard:policy@0.2.0). Config:
{"tools": {"<glob>": {"readOnlyHint": true, "idempotentHint": true, "destructiveHint": false,
"openWorldHint": false, "title": "..."}}}. Only the fields given are overridden; the most
specific matching glob (most literal characters) wins.
"""

import fnmatch
import json
import re

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types

FLAGS = {
    "readOnlyHint": "read_only",
    "destructiveHint": "destructive",
    "idempotentHint": "idempotent",
    "openWorldHint": "open_world",
}

# glob -> (its compiled pattern, {field of types.Hints: value}); filled by init (one instance
# is single-threaded). Compiled there: compiling a pattern per call would cost milliseconds.
rules: dict[str, tuple[re.Pattern[str], dict[str, object]]] = {}


def parse_override(pattern: str, value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise Err(f"tools.{pattern} must be an object")
    override: dict[str, object] = {}
    for key, v in value.items():
        if key in FLAGS:
            if not isinstance(v, bool):
                raise Err(f"tools.{pattern}.{key} must be true or false")
            override[FLAGS[key]] = v
        elif key == "title":
            if not isinstance(v, str):
                raise Err(f"tools.{pattern}.title must be a string")
            override["title"] = v
        else:
            raise Err(f"tools.{pattern}: unknown hint `{key}`")
    return override


def rule_for(name: str) -> dict[str, object] | None:
    matching = [p for p, (compiled, _) in rules.items() if compiled.match(name)]
    if not matching:
        return None
    literal = lambda p: sum(c not in "*?" for c in p)
    return rules[min(matching, key=lambda p: (-literal(p), p))][1]


class WitWorld(wit_world.WitWorld):
    def init(self, config: str) -> None:
        parsed = json.loads(config)
        if not isinstance(parsed, dict):
            raise Err("the config must be a JSON object")
        unknown = [k for k in parsed if k != "tools"]
        if unknown:
            raise Err(f"unknown key `{unknown[0]}` (hints knows only `tools`)")
        tools = parsed.get("tools", {})
        if not isinstance(tools, dict):
            raise Err("`tools` must be an object of glob -> hints")
        rules.clear()
        for pattern, value in tools.items():
            rules[pattern] = (re.compile(fnmatch.translate(pattern)), parse_override(pattern, value))
        if not rules:
            host.log(host.Level.WARN, "no `tools` configured: this plugin changes nothing")

    def decide(self, call: types.Call, current: types.Decision) -> types.Verdict:
        # A tool this plugin declares read-only is promised safe, so it joins the shared gate.
        rule = rule_for(call.tool) if call.tool is not None else None
        if rule is not None and rule.get("read_only") is True:
            current.concurrency = types.Concurrency_Shared()
        return types.Verdict_Continue(current)

    def list_tool(self, tool: types.Tool, current: types.Listing) -> types.Listing:
        # Prompts and resource templates have no annotations.
        if tool.kind != types.ItemKind.TOOL:
            return current
        rule = rule_for(tool.name)
        if rule is not None:
            for field, value in rule.items():
                setattr(current.hints, field, value)
        return current
