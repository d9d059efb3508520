//! A policy plugin with one example rule, to start your own from (`switchyard plugin new NAME
//! --lang rust` writes this file into a ready project): `cursor` may neither call nor see
//! `delete_file`, and anyone else's `delete_file` runs alone on its server. The recorded calls
//! beside it (calls.jsonl) expect exactly that, so `switchyard plugin test` shows what an edit
//! to the rule changes; record what your own rules should answer there too.
//!
//! It also has the content hooks of 0.3 (`on_request`, `on_result`), which read and may change
//! or refuse a call's params and its result. As written they pass everything on unchanged, for
//! the calls `interest` declares; a commented example in each shows what a rule looks like.

// Generates the Rust types and traits of the `policy` world from the WIT contract
// (switchyard:policy@0.3.0).
wit_bindgen::generate!({ path: "../../../wit/0.3", world: "policy" });

use switchyard::policy::host::{Level, log};

struct Template;

impl Guest for Template {
    /// Runs once per instance with the plugin's `config` from switchyard.toml (JSON text).
    /// Refuse what you do not understand: a typo in a key must not leave the plugin doing nothing.
    fn init(config: String) -> Result<(), String> {
        // This template takes no settings, so only an empty object is accepted. A plugin with
        // settings parses the JSON (e.g. with serde_json) and names any unknown key.
        if config.split_whitespace().collect::<String>() != "{}" {
            return Err(format!("the template plugin takes no config, got {config}"));
        }
        log(Level::Debug, "template plugin ready");
        Ok(())
    }

    /// Decides how one request is handled; `current` is what earlier plugins decided.
    fn decide(call: Call, mut current: Decision) -> Verdict {
        // The example rule: refuse one tool to one client (`call.client.name` is the name it gave)...
        if call.client.name.as_deref() == Some("cursor") && call.tool.as_deref() == Some("delete_file") {
            return Verdict::Reject("cursor may not delete files here".into());
        }
        // ...and run everyone else's call of it alone (change a field of `current`, keep the others).
        if call.tool.as_deref() == Some("delete_file") {
            current.concurrency = Some(Concurrency::Exclusive);
        }
        // Add your rules here. Continue hands the decision on; `Verdict::Stop(current)` would
        // end the chain.
        Verdict::Continue(current)
    }

    /// How one listed tool is shown to the client it is listed to; `current` is what earlier
    /// plugins made of it.
    fn list_tool(tool: Tool, mut current: Listing) -> Listing {
        // The example rule: hide one tool from one client; the others still see it.
        if tool.client.name.as_deref() == Some("cursor") && tool.name == "delete_file" {
            current.hidden = true;
        }
        // Add your rules here (rename with `current.name`, reword with `current.description`).
        current
    }

    /// Which calls the two hooks below see; asked once, after `init`. A call outside it never
    /// enters them and costs nothing, so declare no more than your rules need (an empty
    /// `methods` turns the hooks off).
    fn interest() -> Interest {
        Interest {
            // Globs on the JSON-RPC method, e.g. "tools/call", "resources/read", "resources/*".
            methods: vec!["tools/call".into()],
            // For tools/call: globs on the server's name of the tool; empty means every tool.
            tools: vec![],
            request: true,
            result: true,
        }
    }

    /// A request's `params` (JSON text) before the call is sent: for a tools/call, `name` and
    /// `arguments`. Runs before `decide` (which then judges the params the hooks made), in the
    /// chain's order.
    fn on_request(_call: HookCall, _params: String) -> HookVerdict {
        // An example: refuse a tool's argument (parse `params` with serde_json for real rules).
        // if call.tool.as_deref() == Some("write_file") && params.contains("\"/etc/") {
        //     return HookVerdict::Deny("writing under /etc is not allowed here".into());
        // }
        // HookVerdict::Modify(new_params) would send other params instead (the same `name`).
        HookVerdict::Continue
    }

    /// The server's `result` (JSON text) before the client gets it. Runs in the reverse of the
    /// chain's order, on the final result only.
    fn on_result(_call: HookCall, _result: String) -> HookVerdict {
        // An example: change what the model reads (here, hide an internal host name).
        // if result.contains("db.internal") {
        //     return HookVerdict::Modify(result.replace("db.internal", "[internal host]"));
        // }
        // HookVerdict::Deny(reason) would drop the result and answer an error result instead.
        HookVerdict::Continue
    }
}

export!(Template);
