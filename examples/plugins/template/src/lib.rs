//! A policy plugin that changes nothing: start your own from here (`switchyard plugin new NAME
//! --lang rust` writes this file into a ready project).

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
    fn decide(_call: Call, current: Decision) -> Verdict {
        // Example: refuse one tool to one client (`call.client.name` is the name it gave).
        //     if call.client.name.as_deref() == Some("cursor") && call.tool.as_deref() == Some("delete_file") {
        //         return Verdict::Reject("cursor may not delete files here".into());
        //     }
        // Continue hands the decision on (change a field of `current`, keep the others);
        // `Verdict::Stop(current)` would end the chain.
        Verdict::Continue(current)
    }

    /// How one listed tool is shown to the client it is listed to; `current` is what earlier
    /// plugins made of it.
    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        // Example: hide one tool from one client; the others still see it.
        //     if tool.client.name.as_deref() == Some("cursor") && tool.name == "delete_file" {
        //         return Listing { hidden: true, ..current };
        //     }
        current
    }
}

export!(Template);
