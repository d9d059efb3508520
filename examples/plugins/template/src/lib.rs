//! A policy plugin that changes nothing: start your own from here (`switchyard plugin new NAME
//! --lang rust` writes this file into a ready project).

// Generates the Rust types and traits of the `policy` world from the WIT contract.
wit_bindgen::generate!({ path: "../../../wit", world: "policy" });

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
    fn decide(_call: Call, current: Decision) -> Verdict {
        // Example: refuse one tool, and run writes one at a time.
        //     if call.tool.as_deref() == Some("delete_file") {
        //         return Verdict::Reject("deleting files is not allowed here".into());
        //     }
        //     if call.declared.read_only != Some(true) {
        //         current.concurrency = Some(Concurrency::Exclusive);
        //     }
        // Continue hands the decision on; `Verdict::Stop(d)` would end the chain.
        Verdict::Continue(current)
    }

    /// Annotation hints for one listed tool; `current` is what earlier plugins made of them.
    fn annotate(_tool: Tool, current: Hints) -> Hints {
        // Example: tell clients that `search` only reads, so they may run it in parallel.
        //     if tool.name == "search" {
        //         return Hints { read_only: Some(true), ..current };
        //     }
        current
    }
}

export!(Template);
