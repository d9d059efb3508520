//! Test fixture: prints to stdout and stderr on every call, and panics on demand.
//!
//! Every `init`, `decide` and `annotate` writes a line to stdout and one to stderr, as a
//! plugin with debugging output left in does. Config (every key optional):
//! `{"panic_in_decide": "<tool>", "panic_in_annotate": "<tool>"}` makes `decide` (or
//! `annotate`) panic for that tool, so its message is printed to stderr just before the trap.

wit_bindgen::generate!({ path: "../../../../wit", world: "policy" });

use std::cell::RefCell;

use plugin_util::parse_config;
use serde_json::Value;

#[derive(Default)]
struct Panics {
    decide: Option<String>,
    annotate: Option<String>,
}

thread_local! {
    static PANICS: RefCell<Panics> = RefCell::new(Panics::default());
}

struct Noisy;

impl Guest for Noisy {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        let mut panics = Panics::default();
        for (k, v) in &config {
            let tool = match v {
                Value::String(s) => Some(s.clone()),
                _ => return Err(format!("`{k}` must be a tool name")),
            };
            match k.as_str() {
                "panic_in_decide" => panics.decide = tool,
                "panic_in_annotate" => panics.annotate = tool,
                other => return Err(format!("unknown key `{other}`")),
            }
        }
        PANICS.with(|p| *p.borrow_mut() = panics);
        println!("noisy: init (stdout)");
        eprintln!("noisy: init (stderr)");
        Ok(())
    }

    fn decide(call: Call, current: Decision) -> Verdict {
        let tool = call.tool.unwrap_or_default();
        println!("noisy: decide {tool} (stdout)");
        eprintln!("noisy: decide {tool} (stderr)");
        if PANICS.with(|p| p.borrow().decide.as_deref() == Some(tool.as_str())) {
            panic!("noisy panics in decide for {tool}");
        }
        Verdict::Continue(current)
    }

    fn annotate(tool: Tool, current: Hints) -> Hints {
        println!("noisy: annotate {} (stdout)", tool.name);
        eprintln!("noisy: annotate {} (stderr)", tool.name);
        if PANICS.with(|p| p.borrow().annotate.as_deref() == Some(tool.name.as_str())) {
            panic!("noisy panics in annotate for {}", tool.name);
        }
        current
    }
}

export!(Noisy);
