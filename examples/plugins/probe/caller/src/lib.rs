//! A test fixture (`switchyard:policy@0.2.0`): refuses every request whose method is in its
//! config's `methods`, with a reason that is what it was told of the call as JSON (method,
//! tool, client, era, task), so a test can see what a plugin sees through the whole router.

wit_bindgen::generate!({ path: "../../../../wit/0.2", world: "policy" });

use std::cell::RefCell;

use serde_json::{Value, json};

struct Probe;

thread_local! {
    static METHODS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

impl Guest for Probe {
    fn init(config: String) -> Result<(), String> {
        let v: Value = serde_json::from_str(&config).map_err(|e| format!("config is not JSON: {e}"))?;
        let methods = v
            .get("methods")
            .and_then(Value::as_array)
            .ok_or("config needs `methods`: a list of methods to refuse")?
            .iter()
            .map(|m| m.as_str().map(str::to_string).ok_or("`methods` holds strings"))
            .collect::<Result<Vec<_>, _>>()?;
        METHODS.with(|m| *m.borrow_mut() = methods);
        Ok(())
    }

    fn decide(call: Call, current: Decision) -> Verdict {
        if !METHODS.with(|m| m.borrow().contains(&call.method)) {
            return Verdict::Continue(current);
        }
        let transport = match call.client.transport {
            Transport::Stdio => "stdio",
            Transport::Socket => "socket",
            Transport::Http => "http",
        };
        let seen = json!({
            "method": call.method,
            "tool": call.tool,
            "client": {
                "name": call.client.name,
                "version": call.client.version,
                "transport": transport,
                "dir": call.client.dir,
                "token": call.client.token,
            },
            "era": call.era,
            "task": call.task.map(|t| json!({"id": t.id, "tool": t.tool})),
        });
        Verdict::Reject(seen.to_string())
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }
}

export!(Probe);
