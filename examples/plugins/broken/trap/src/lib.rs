//! Test fixture: traps on demand, fails `init` on demand, and can exhaust its memory.
//!
//! `decide` panics for the tool `trap`, allocates without bound for `alloc`, stops the chain
//! (pool `stopped`) for `stop`, and otherwise
//! continues with a pool named after how many calls this instance has served (so a test can
//! see that a trapped instance was replaced by a fresh one). `annotate` panics for `trap`.
//! `init` fails when the config has a `fail` key, with its value as the message.

wit_bindgen::generate!({ path: "../../../../wit", world: "policy" });

use std::cell::Cell;

thread_local! {
    static CALLS: Cell<u32> = const { Cell::new(0) };
}

struct Trap;

impl Guest for Trap {
    fn init(config: String) -> Result<(), String> {
        // A string search keeps this fixture free of a JSON dependency.
        if let Some(i) = config.find("\"fail\"") {
            return Err(format!("refusing to start: {}", &config[i..]));
        }
        Ok(())
    }

    fn decide(call: Call, current: Decision) -> Verdict {
        let n = CALLS.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        match call.tool.as_deref() {
            Some("trap") => panic!("this fixture traps on purpose"),
            Some("alloc") => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            Some("stop") => Verdict::Stop(Decision { pool: Some("stopped".into()), ..current }),
            _ => Verdict::Continue(Decision { pool: Some(format!("calls-{n}")), ..current }),
        }
    }

    fn annotate(tool: Tool, current: Hints) -> Hints {
        if tool.name == "trap" {
            panic!("this fixture traps on purpose");
        }
        current
    }
}

export!(Trap);
