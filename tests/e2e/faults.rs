//! Randomised faults against the real binary: every request gets exactly one response (or none,
//! if its own client cancelled it), no session sees another's messages, no child outlives the router.

mod harness;
mod setup;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use harness::*;
use serde_json::json;
use setup::*;

/// xorshift64*: a tiny deterministic generator, so a failing seed can be replayed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What one session sent: ids it expects exactly one answer for, and ids it cancelled.
#[derive(Default)]
struct Ledger {
    expect: HashMap<i64, String>,
    cancelled: HashSet<i64>,
}

async fn storm(c: &mut Client, tag: &str, rng: &mut Rng, calls: i64) -> Ledger {
    let mut ledger = Ledger::default();
    for id in 0..calls {
        let (tool, args) = match rng.below(10) {
            0..=3 => ("echo", json!({"text": format!("{tag}:{id}")})),
            4..=6 => ("sleep", json!({"ms": rng.below(150)})),
            7 | 8 => ("write", json!({"path": format!("/f{}", rng.below(3)), "text": tag, "ms": rng.below(50)})),
            _ => ("crash", json!({"code": 9})),
        };
        // Both sessions use the same ids on purpose: the router must keep them apart.
        c.send_request_with_id(json!(id), "tools/call", json!({"name": tool, "arguments": args})).await;
        ledger.expect.insert(id, tool.to_string());
        if rng.below(8) == 0 && id > 0 {
            let victim = (rng.below(id as u64)) as i64;
            if ledger.expect.get(&victim).is_some_and(|t| t == "sleep") {
                c.cancel(&json!(victim), "storm").await;
                ledger.cancelled.insert(victim);
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.below(15))).await;
    }
    ledger
}

/// Reads until every non-cancelled request is answered (and a little longer for strays).
async fn settle(c: &mut Client, tag: &str, ledger: &Ledger) {
    let mut answers: HashMap<i64, usize> = HashMap::new();
    let need: HashSet<i64> = ledger.expect.keys().filter(|id| !ledger.cancelled.contains(id)).copied().collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let done = need.iter().all(|id| answers.contains_key(id));
        let limit = if done { Duration::from_millis(500) } else { Duration::from_secs(10) };
        let Some(m) = c.recv_timeout(limit).await else {
            assert!(
                done,
                "{tag}: no answer for {:?}",
                need.iter().filter(|id| !answers.contains_key(id)).collect::<Vec<_>>()
            );
            break;
        };
        assert!(std::time::Instant::now() < deadline, "{tag}: did not settle");
        if !is_response(&m) {
            continue;
        }
        let id = m["id"].as_i64().unwrap_or_else(|| panic!("{tag}: response without a numeric id: {m}"));
        assert!(ledger.expect.contains_key(&id), "{tag}: answer to an id never sent: {m}");
        *answers.entry(id).or_default() += 1;
        assert_eq!(answers[&id], 1, "{tag}: second answer for id {id}: {m}");
        if ledger.expect[&id] == "echo" && m.get("result").is_some() {
            assert_eq!(tool_text(&m), format!("{tag}:{id}"), "{tag}: got another session's echo");
        }
    }
}

#[tokio::test]
async fn every_request_is_answered_once_under_random_crashes_and_cancels() {
    let seed = std::env::var("SWITCHYARD_FAULT_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5EED_1234_u64);
    eprintln!("fault seed: {seed} (replay with SWITCHYARD_FAULT_SEED={seed})");
    let dir = temp_dir();
    let journal_file = journal_in(&dir);
    let sock = dir.path().join("f.sock");
    let cfg = "[pools.default]\nmin = 1\nmax = 3\nmax_inflight = 2\n[limits]\ncall_timeout_ms = 5000\n";
    let mut s =
        Setup::with_config(&["--journal", &journal_file], &["--listen", sock.to_str().unwrap()], Some(cfg)).await;
    s.client.initialize().await;
    let (mut other_proc, mut other) = connect(&sock).await;
    other.initialize().await;

    let mut rng_a = Rng(seed | 1);
    let mut rng_b = Rng(seed.rotate_left(17) | 1);
    let (la, lb) = tokio::join!(storm(&mut s.client, "A", &mut rng_a, 80), storm(&mut other, "B", &mut rng_b, 80));
    tokio::join!(settle(&mut s.client, "A", &la), settle(&mut other, "B", &lb));

    other.close().await;
    other_proc.wait().await;
    s.client.close().await;
    assert_eq!(s.router.wait_timeout(Duration::from_secs(10)).await.code(), Some(0));
    let pids: HashSet<u32> =
        harness::journal(&journal_file).iter().filter_map(|e| e["pid"].as_u64()).map(|p| p as u32).collect();
    assert!(pids.len() > 1, "the storm should have crashed instances: {pids:?}");
    for pid in pids {
        assert!(wait_gone(pid, Duration::from_secs(3)).await, "fixture {pid} outlived the router");
    }
}
