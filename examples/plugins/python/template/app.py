"""A policy plugin with one example rule, to start your own from: `cursor` may neither call nor
see `delete_file`, and anyone else's `delete_file` runs alone on its server. The recorded calls
beside it (calls.jsonl) expect exactly that, so `switchyard plugin test` shows what an edit to
the rule changes; record what your own rules should answer there too.

It also has the content hooks of 0.3 (on_request, on_result), which read and may change or
refuse a call's params and its result. As written they pass everything on unchanged, for the
calls `interest` declares; a commented example in each shows what a rule looks like.

Built with `switchyard plugin build` (componentize-py, world `policy` of wit/policy.wit,
switchyard:policy@0.3.0). The types come from the WIT: wit_world.imports.types (Call, Client,
Decision, Verdict_*, Tool, Listing, Hints, Interest, HookCall, HookVerdict_*).
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import host, types


class WitWorld(wit_world.WitWorld):
    def init(self, config: str) -> None:
        """Runs once per instance with the plugin's `config` from switchyard.toml (JSON text).

        Refuse what you do not understand: a typo in a key must not leave the plugin doing nothing.
        """
        if json.loads(config) != {}:
            raise Err(f"this plugin takes no config, got {config}")
        host.log(host.Level.DEBUG, "plugin ready")

    def decide(self, call: types.Call, current: types.Decision) -> types.Verdict:
        """Decides how one request is handled; `current` is what earlier plugins decided."""
        # The example rule: refuse one tool to one client (`call.client.name` is the name it gave)...
        if call.client.name == "cursor" and call.tool == "delete_file":
            return types.Verdict_Reject("cursor may not delete files here")
        # ...and run everyone else's call of it alone (set a field of `current`, keep the others).
        if call.tool == "delete_file":
            current.concurrency = types.Concurrency_Exclusive()
        # Add your rules here. Continue hands the decision on; types.Verdict_Stop(current) would
        # end the chain.
        return types.Verdict_Continue(current)

    def list_tool(self, tool: types.Tool, current: types.Listing) -> types.Listing:
        """How one listed tool is shown to the client it is listed to; `current` is what
        earlier plugins made of it."""
        # The example rule: hide one tool from one client; the others still see it.
        if tool.client.name == "cursor" and tool.name == "delete_file":
            current.hidden = True
        # Add your rules here (rename with current.name, reword with current.description).
        return current

    def interest(self) -> types.Interest:
        """Which calls the two hooks below see; asked once, after `init`. A call outside it never
        enters them and costs nothing, so declare no more than your rules need (an empty
        `methods` turns the hooks off)."""
        return types.Interest(
            # Globs on the JSON-RPC method, e.g. "tools/call", "resources/read", "resources/*".
            methods=["tools/call"],
            # For tools/call: globs on the server's name of the tool; empty means every tool.
            tools=[],
            request=True,
            result=True,
        )

    def on_request(self, call: types.HookCall, params: str) -> types.HookVerdict:
        """A request's `params` (JSON text) before the call is sent: for a tools/call, `name`
        and `arguments`. Runs before `decide` (which then judges the params the hooks made), in
        the chain's order."""
        # An example: refuse a tool's argument.
        # if call.tool == "write_file" and json.loads(params)["arguments"].get("path", "").startswith("/etc/"):
        #     return types.HookVerdict_Deny("writing under /etc is not allowed here")
        # types.HookVerdict_Modify(new_params) would send other params instead (the same `name`).
        return types.HookVerdict_Continue()

    def on_result(self, call: types.HookCall, result: str) -> types.HookVerdict:
        """The server's `result` (JSON text) before the client gets it. Runs in the reverse of
        the chain's order, on the final result only."""
        # An example: change what the model reads (here, hide an internal host name).
        # if "db.internal" in result:
        #     return types.HookVerdict_Modify(result.replace("db.internal", "[internal host]"))
        # types.HookVerdict_Deny(reason) would drop the result and answer an error result instead.
        return types.HookVerdict_Continue()
