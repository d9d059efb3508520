//! Runs an SDK client script (TypeScript or Python) that prints a JSON transcript of what it saw,
//! for the tests that compare a client's view directly and through switchyard.

#![allow(dead_code)]

use std::io::Read;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One run of a client script.
pub struct Run {
    /// The program, for messages (`client.mjs`, `client.py`).
    pub program: String,
    pub status: Option<i32>,
    /// The transcript (JSON).
    pub stdout: String,
    /// The client's stderr, which also carries the stderr of the server command it started (the
    /// router and, behind it, the real server).
    pub stderr: String,
    pub elapsed: Duration,
}

impl Run {
    /// The transcript; a failed run or output that is not JSON fails the test with everything
    /// the client, the router and the server printed. The server's `tools.listChanged` is taken
    /// out of every capabilities it holds: switchyard declares it whatever the server does (it
    /// sends the notification itself, when the list a client sees changes; `budgets.rs` tests
    /// that), so it is the one capability a client sees differently through switchyard.
    pub fn transcript(&self, what: &str) -> Value {
        let mut t = self.raw_transcript(what);
        without_tools_list_changed(&mut t);
        t
    }

    fn raw_transcript(&self, what: &str) -> Value {
        if self.status != Some(0) {
            panic!(
                "{what}: {} exited with {:?} after {:?}\n--- stdout (transcript)\n{}\n--- stderr (client, router, server)\n{}",
                self.program, self.status, self.elapsed, self.stdout, self.stderr
            );
        }
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("{what}: transcript is not JSON ({e})\n--- stdout\n{}\n--- stderr\n{}", self.stdout, self.stderr)
        })
    }
}

/// Runs `cmd` (stdout and stderr piped) to its end, or kills it after `limit`.
pub fn run(mut cmd: Command, program: &str, limit: Duration) -> Run {
    let started = Instant::now();
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let mut out = child.stdout.take().expect("stdout piped");
    let mut err = child.stderr.take().expect("stderr piped");
    // Both pipes are read on threads, so a full pipe cannot stall the client while we wait.
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap_or_else(|e| panic!("wait for {program}: {e}")) {
            break st.code();
        }
        if started.elapsed() > limit {
            // Our own child, killed by handle; its own watchdog should have fired long before.
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        program: program.to_string(),
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
        elapsed: started.elapsed(),
    }
}

/// Takes `tools.listChanged` out of every `capabilities` object in `v`.
fn without_tools_list_changed(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(tools) =
                map.get_mut("capabilities").and_then(|c| c.get_mut("tools")).and_then(Value::as_object_mut)
            {
                tools.remove("listChanged");
            }
            map.values_mut().for_each(without_tools_list_changed);
        }
        Value::Array(items) => items.iter_mut().for_each(without_tools_list_changed),
        _ => {}
    }
}
