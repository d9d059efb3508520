//! Configuration mistakes a user makes in the first hour, seen through the real binary.

mod harness;
mod setup;

use std::time::Duration;

use setup::*;

/// `[pools.defualt]` parses (pool names are free), but no call can reach it: the router must say
/// so on stderr, naming the pool and the likely fix, and still serve calls on `default`.
#[tokio::test]
async fn a_misspelt_default_pool_is_named_in_a_warning() {
    let mut s = Setup::with_config(&[], &[], Some("[pools.defualt]\nmax = 4\nmax_inflight = 1\n")).await;
    s.client.initialize().await;
    assert_eq!(s.client.call_text("echo", serde_json::json!({"text": "hi"})).await, "hi");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let log = s.router.stderr.text();
        if log.contains("pool `defualt`") {
            assert!(log.contains("did you mean [pools.default]?"), "{log}");
            assert!(log.contains("no call can reach it"), "{log}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no warning about [pools.defualt]:\n{log}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
