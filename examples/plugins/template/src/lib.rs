//! A policy plugin with one example rule, to start your own from (`switchyard plugin new NAME
//! --lang rust` writes this file into a ready project): `cursor` may neither call nor see
//! `delete_file`, and anyone else's `delete_file` runs alone on its server. The recorded calls
//! beside it (calls.jsonl) expect exactly that, so `switchyard plugin test` shows what an edit
//! to the rule changes; record what your own rules should answer there too.

// Generates the Rust types and traits of the `policy` world from the WIT contract
// (switchyard:policy@0.2.0).
wit_bindgen::generate!({ path: "../../../wit/0.2", world: "policy" });

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
}

export!(Template);
