//! The size of the future a session spawns for one request, and of the stages it holds: each
//! is built, then copied whole into its box, per request; a stage awaited inline is carried by
//! every request, however rare the path that reaches it.

use super::super::Session;
use crate::call::future_size as size;

/// The largest the future a request is spawned in may be: 3,632 bytes when this was set, and
/// any rare stage awaited inline again (each 700 bytes or more) goes past it. Measured the same
/// in debug and release builds (a future's layout is settled before code generation), so one
/// bound holds for both.
const BOUND: usize = 4096;

/// The future `session::message` spawns per request: [`Session::respond`].
#[allow(unreachable_code, clippy::diverging_sub_expression)]
fn spawned() -> usize {
    size(|| Session::respond(todo!(), todo!(), todo!()))
}

#[allow(unreachable_code, clippy::diverging_sub_expression)]
fn stages() -> Vec<(&'static str, usize)> {
    let mut all = vec![
        ("spawned per request", spawned()),
        ("Session::run", size(|| Session::run(todo!(), todo!(), todo!()))),
        ("Session::shape_request", size(|| Session::shape_request(todo!(), todo!(), todo!()))),
        ("Session::dispatch", size(|| Session::dispatch(todo!(), todo!(), todo!(), todo!()))),
        ("Session::forward", size(|| Session::forward(todo!(), todo!(), todo!(), todo!()))),
        ("Session::forward_to", size(|| Session::forward_to(todo!(), todo!(), todo!(), todo!(), todo!()))),
    ];
    all.extend(crate::call::future_sizes());
    all
}

/// Run in release to see the numbers:
/// `cargo test --release -p switchyard-router --lib -- request_future_size --nocapture`.
#[test]
fn request_future_size_stays_small() {
    let all = stages();
    for (name, bytes) in &all {
        println!("{name:<28} {bytes:>6} bytes");
    }
    let spawned = all[0].1;
    assert!(
        spawned <= BOUND,
        "the future spawned per request is {spawned} bytes, over {BOUND}: a stage awaited inline on the common path grew, or a rare one is no longer boxed where it is awaited"
    );
}
