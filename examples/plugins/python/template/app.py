"""A policy plugin that changes nothing: start your own from here.

Built with `switchyard plugin build` (componentize-py, world `policy` of wit/policy.wit).
The types come from the WIT: wit_world.imports.types (Call, Decision, Verdict_*, Tool, Hints).
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
        # Example: refuse one tool, and run writes one at a time.
        # if call.tool == "delete_file":
        #     return types.Verdict_Reject("deleting files is not allowed here")
        # if call.declared.read_only is not True:
        #     current.concurrency = types.Concurrency_Exclusive()
        # Continue hands the decision on; types.Verdict_Stop(current) would end the chain.
        return types.Verdict_Continue(current)

    def annotate(self, tool: types.Tool, current: types.Hints) -> types.Hints:
        """Annotation hints for one listed tool; `current` is what earlier plugins made of them."""
        # Example: tell clients that `search` only reads, so they may run it in parallel.
        # if tool.name == "search":
        #     current.read_only = True
        return current
