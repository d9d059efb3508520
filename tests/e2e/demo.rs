//! End-to-end test of `switchyard demo`: it runs on embedded defaults, exits 0 and reports all
//! six scenarios, the silent link's with the call that hung directly and was answered through
//! switchyard.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The demo takes about 37 s with a release build (25 s of it the silent link's fixed waits); a
/// debug build under a loaded machine is slower.
const LIMIT: Duration = Duration::from_secs(150);

#[test]
fn the_demo_runs_every_scenario_and_exits_0() {
    let mut child = Command::new(switchyard_testkit::bin())
        .arg("demo")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn switchyard demo");
    // Read both pipes on threads so a full pipe cannot stall the demo while we wait.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the demo") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the demo ran longer than {LIMIT:?}\n{}", out.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "demo failed ({status})\n--- stdout ---\n{out}\n--- stderr ---\n{err}");
    for section in ["1 head-of-line", "2 annotations", "3 crash", "4 hot reload", "5 silent link", "6 sigterm"] {
        assert!(out.contains(section), "no `{section}` in the demo's output:\n{out}");
    }
    let silent = out.lines().find(|l| l.starts_with("5 silent link")).expect("the silent link's row");
    assert!(silent.contains("no answer in 20 s (hung)") && silent.contains("result (new connection)"), "{silent}");
    let sigterm = out.lines().find(|l| l.starts_with("6 sigterm")).expect("the sigterm row");
    assert!(sigterm.contains("dies, with its state") && sigterm.contains("lives on (same pid)"), "{sigterm}");
    assert!(out.contains("all 6 scenarios behaved as expected"), "{out}");
    // The children's logs stay out of the table.
    assert!(!out.contains("fixture[fixture]: pid"), "child stderr leaked into stdout:\n{out}");
}
