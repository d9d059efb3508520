"""A policy plugin with one example rule, to start your own from: `cursor` may neither call nor
see `delete_file`, and anyone else's `delete_file` runs alone on its server. The recorded calls
beside it (calls.jsonl) expect exactly that, so `switchyard plugin test` shows what an edit to
the rule changes; record what your own rules should answer there too.

Built with `switchyard plugin build` (componentize-py, world `policy` of wit/policy.wit,
switchyard:policy@0.2.0). The types come from the WIT: wit_world.imports.types (Call, Client,
Decision, Verdict_*, Tool, Listing, Hints).
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
