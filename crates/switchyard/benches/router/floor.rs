//! The stdio path beside its floor: `run` and `connect` against a compiled byte relay (what any
//! process in the middle pays) and a direct connection, on the fixture and on server-everything,
//! as echo p50 and as calls/s with 64 requests outstanding, in interleaved rounds.

use super::*;

/// Rounds of the throughput measurement: each round measures every target once, in turn.
const RATE_ROUNDS: usize = 5;
const WINDOW: usize = 64;

impl Bench {
    pub(crate) fn floor(&self) {
        let fx = self.fixture_argv();
        self.floor_of("fixture", "text", &fx, BLOCK);
        match self.everything_argv() {
            Some(ev) => self.floor_of("server-everything", "message", &ev, BLOCK / 2),
            None => println!("\n(server-everything not installed: run `npm ci --ignore-scripts` in tests/npm)"),
        }
    }

    fn floor_of(&self, server: &str, field: &'static str, argv: &[String], block: usize) {
        let name = if field == "text" { "ffx" } else { "fev" };
        // Made before the targets, so dropped after them (a live connect would start it again).
        let (_home, connect) = self.daemon_argv(name, argv);
        let mut targets = [
            self.conn("direct", field, argv.to_vec()),
            self.conn("byte relay (C, poll loop)", field, self.relay_argv(argv)),
            self.conn("switchyard run", field, self.router_argv(name, "", &[], argv)),
            // The audit log is on by default; this row shows what it takes of the figures above.
            self.conn(
                "switchyard run, audit off",
                field,
                self.router_argv(&format!("{name}-quiet"), "[audit]\nenabled = false\n", &[], argv),
            ),
            self.conn("switchyard connect, to the daemon", field, connect),
            self.conn("line-copying proxy (Python)", field, self.line_proxy_argv(argv)),
        ];
        let mut samples: Vec<Vec<Duration>> = targets.iter().map(|_| Vec::new()).collect();
        for _ in 0..ROUNDS {
            for (t, out) in targets.iter_mut().zip(samples.iter_mut()) {
                t.round_trips(block, out);
            }
        }
        let mut rates: Vec<Vec<f64>> = targets.iter().map(|_| Vec::new()).collect();
        for _ in 0..RATE_ROUNDS {
            for (t, out) in targets.iter_mut().zip(rates.iter_mut()) {
                out.push(t.pipelined(WINDOW));
            }
        }
        let p50: Vec<Duration> = samples
            .iter_mut()
            .map(|s| {
                s.sort();
                pct(s, 0.5)
            })
            .collect();
        let per_s: Vec<f64> = rates.iter().map(|r| median_f(r)).collect();
        println!(
            "\n### {server} `echo`: p50 ({ROUNDS} alternating rounds of {block}) and calls/s with {WINDOW} \
             outstanding (median of {RATE_ROUNDS} alternating rounds of {} s)\n",
            MEASURE.as_secs_f64()
        );
        println!("| target | p50 | p50 / direct | p50 / relay | calls/s | / direct | / relay |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for (i, t) in targets.iter().enumerate() {
            let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
            println!(
                "| {} | {} | {:.2}× | {:.2}× | {} | {:.2}× | {:.2}× |",
                t.label,
                us(p50[i]),
                ratio(p50[i], p50[0]),
                ratio(p50[i], p50[1]),
                rate(per_s[i]),
                per_s[i] / per_s[0],
                per_s[i] / per_s[1]
            );
        }
    }
}
