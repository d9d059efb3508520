//! Test fixture: `decide` never returns for the tool `spin`, so the host's deadline must stop it.

wit_bindgen::generate!({ path: "../../../../wit", world: "policy" });

struct Spin;

impl Guest for Spin {
    fn init(_config: String) -> Result<(), String> {
        Ok(())
    }

    fn decide(call: Call, current: Decision) -> Verdict {
        if call.tool.as_deref() == Some("spin") {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        // Any other call succeeds, so a test can show the plugin works again after a timeout.
        Verdict::Continue(Decision { timeout_ms: Some(1234), ..current })
    }

    fn annotate(_tool: Tool, current: Hints) -> Hints {
        current
    }
}

export!(Spin);
