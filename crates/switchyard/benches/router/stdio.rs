//! The stdio path: added latency against the fixture and server-everything, the plugin chain,
//! throughput by requests outstanding, memory with calls in flight.

use super::*;

impl Bench {
    /// Added latency against the fast fixture's `echo`.
    pub(crate) fn latency_fixture(&self) {
        let fx = self.fixture_argv();
        let (_home, connect) = self.daemon_argv("fx", &fx);
        let relayed = relayed(&connect);
        let mut targets = vec![
            (self.conn("direct", "text", fx.clone()), BLOCK),
            (self.conn("switchyard", "text", self.router_argv("lat", "", &[], &fx)), BLOCK),
            (self.socket_conn("switchyard via its --listen socket", &fx), BLOCK),
            (self.conn("switchyard connect, to the daemon", "text", connect), BLOCK),
            (self.conn("switchyard connect, relayed (SWITCHYARD_HANDOFF=0)", "text", relayed), BLOCK),
            (self.conn("line-copying proxy (Python)", "text", self.line_proxy_argv(&fx)), BLOCK),
            (self.conn("shell log proxy", "text", self.shell_argv(&fx)), BLOCK / 10),
        ];
        println!("\n### Round-trip latency, fixture `echo` ({ROUNDS} alternating rounds; sequential calls)\n");
        latency_table(&mut targets);
    }

    /// Added latency against @modelcontextprotocol/server-everything `echo` (node).
    pub(crate) fn latency_everything(&self) {
        let Some(ev) = self.everything_argv() else {
            println!("\n(server-everything not installed: run `npm ci --ignore-scripts` in tests/npm)");
            return;
        };
        let (_home, connect) = self.daemon_argv("ev", &ev);
        let relayed = relayed(&connect);
        let mut targets = vec![
            (self.conn("direct", "message", ev.clone()), BLOCK / 2),
            (self.conn("switchyard", "message", self.router_argv("ev", "", &[], &ev)), BLOCK / 2),
            (self.conn("switchyard connect, to the daemon", "message", connect), BLOCK / 2),
            (self.conn("switchyard connect, relayed (SWITCHYARD_HANDOFF=0)", "message", relayed), BLOCK / 2),
            (self.conn("line-copying proxy (Python)", "message", self.line_proxy_argv(&ev)), BLOCK / 2),
            (self.conn("shell log proxy", "message", self.shell_argv(&ev)), BLOCK / 10),
        ];
        println!(
            "\n### Round-trip latency, server-everything `echo` ({ROUNDS} alternating rounds; sequential calls)\n"
        );
        latency_table(&mut targets);
    }

    /// The whole router's latency with 0, 1 and 3 example plugins in the chain.
    pub(crate) fn plugins(&self) {
        let fx = self.fixture_argv();
        let one = "[[plugins]]\nfile = \"hints.wasm\"\nconfig = { tools = { \"read*\" = { readOnlyHint = true } } }\n";
        let three = format!(
            "{one}\n[[plugins]]\nfile = \"fs-keys.wasm\"\nconfig = {{ writes = [\"write\"], reads = [\"read\"] }}\n\n[[plugins]]\nfile = \"timeouts.wasm\"\nconfig = {{ tools = {{ \"*\" = {{ timeout_ms = 60000 }} }} }}\n"
        );
        let mut targets = vec![
            (self.conn("direct", "text", fx.clone()), BLOCK),
            (self.conn("switchyard, no plugins", "text", self.router_argv("p0", "", &[], &fx)), BLOCK),
            (self.conn("switchyard, hints", "text", self.router_argv("p1", one, &["hints.wasm"], &fx)), BLOCK),
            (
                self.conn(
                    "switchyard, hints+fs-keys+timeouts",
                    "text",
                    self.router_argv("p3", &three, &["hints.wasm", "fs-keys.wasm", "timeouts.wasm"], &fx),
                ),
                BLOCK,
            ),
        ];
        println!("\n### Plugin chain, end to end: fixture `echo` through the router ({ROUNDS} alternating rounds)\n");
        latency_table(&mut targets);
    }

    /// A content plugin (0.3) on a 1 KB call: the pass-through template (both hooks, every
    /// tool), and `redact` told to read another tool's results only (the call is outside its
    /// interest), beside no plugin and a 0.2 plugin (`guard`, which blocks nothing here): every
    /// plugin's `decide` runs for every call, so that is what a plugin whose hooks do not want
    /// the call is to be compared with.
    pub(crate) fn content(&self) {
        let fx = self.fixture_argv();
        let kb = "x".repeat(1000);
        let pass = "[[plugins]]\nfile = \"template.wasm\"\n";
        let elsewhere = "[[plugins]]\nfile = \"redact.wasm\"\nconfig = { tools = [\"search_*\"] }\n";
        let decide_only = "[[plugins]]\nfile = \"guard.wasm\"\nconfig = { deny = [\"delete_*\"] }\n";
        let mut targets = vec![
            (self.conn("direct", "text", fx.clone()).echoing(&kb), BLOCK),
            (self.conn("switchyard, no plugins", "text", self.router_argv("c0", "", &[], &fx)).echoing(&kb), BLOCK),
            (
                self.conn(
                    "switchyard, a 0.2 plugin, decide only (guard)",
                    "text",
                    self.router_argv("cg", decide_only, &["guard.wasm"], &fx),
                )
                .echoing(&kb),
                BLOCK,
            ),
            (
                self.conn(
                    "switchyard, pass-through content plugin (template)",
                    "text",
                    self.router_argv("c1", pass, &["template.wasm"], &fx),
                )
                .echoing(&kb),
                BLOCK,
            ),
            (
                self.conn(
                    "switchyard, content plugin, call outside its interest (redact)",
                    "text",
                    self.router_argv("c2", elsewhere, &["redact.wasm"], &fx),
                )
                .echoing(&kb),
                BLOCK,
            ),
        ];
        println!(
            "\n### Content hooks, end to end: fixture `echo` of 1 KB through the router ({ROUNDS} alternating rounds)\n"
        );
        latency_table(&mut targets);
    }

    /// Calls/s with 1, 8 and 64 requests outstanding on one connection.
    pub(crate) fn throughput(&self) {
        let fx = self.fixture_argv();
        // Made before the targets, so dropped after them: stopped with its connects still live,
        // the daemon would be started again by them (as a live connect does).
        let (_home, connect) = self.daemon_argv("tc", &fx);
        let mut targets: Vec<Conn> = vec![self.conn("direct", "text", fx.clone())];
        for n in [1, 2, 4] {
            let config = format!("[pools.default]\nmin = {n}\nmax = {n}\n");
            targets.push(self.conn(
                &format!("switchyard, pool of {n}"),
                "text",
                self.router_argv(&format!("t{n}"), &config, &[], &fx),
            ));
        }
        targets.push(self.conn("switchyard connect, relayed (SWITCHYARD_HANDOFF=0)", "text", relayed(&connect)));
        targets.push(self.conn("switchyard connect, to the daemon", "text", connect));
        targets.push(self.conn("line-copying proxy (Python)", "text", self.line_proxy_argv(&fx)));
        targets.push(self.conn("shell log proxy", "text", self.shell_argv(&fx)));
        let windows = [1usize, 8, 64];
        let mut rates = vec![vec![0.0f64; windows.len()]; targets.len()];
        // Windows outermost: every target is measured at one window before the next window.
        for (wi, &w) in windows.iter().enumerate() {
            for (ti, t) in targets.iter_mut().enumerate() {
                rates[ti][wi] = t.pipelined(w);
            }
        }
        println!(
            "\n### Throughput, fixture `echo`, requests outstanding on one connection ({} s per cell)\n",
            MEASURE.as_secs_f64()
        );
        println!("| target | 1 | 8 | 64 |");
        println!("|---|---:|---:|---:|");
        for (t, r) in targets.iter().zip(&rates) {
            println!("| {} | {} | {} | {} |", t.label, rate(r[0]), rate(r[1]), rate(r[2]));
        }
        let direct = &rates[0];
        for (t, r) in targets.iter().zip(&rates).skip(1) {
            println!(
                "\n{} / direct: {:.2} / {:.2} / {:.2}",
                t.label,
                r[0] / direct[0],
                r[1] / direct[1],
                r[2] / direct[2]
            );
        }
    }

    /// Router RSS idle and with 1,000 calls in flight.
    pub(crate) fn memory(&self) {
        let fx = self.fixture_argv();
        let mut c = self.conn("switchyard", "text", self.router_argv("mem", "", &[], &fx));
        for id in 0..100 {
            c.call(&echo_request(id, c.field));
        }
        let idle = rss_kib(c.pid());
        let n = 1000u64;
        let sleep_ms = 3000;
        let started = Instant::now();
        for id in 1000..1000 + n {
            c.send(&format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"sleep","arguments":{{"ms":{sleep_ms}}}}}}}"#
            ));
        }
        c.flush();
        // Every call has reached the server by now (it answers each after 3 s).
        std::thread::sleep(Duration::from_millis(1000));
        let busy = rss_kib(c.pid());
        let fixture_busy = child_rss_kib(c.pid());
        let mut ok = 0;
        for _ in 0..n {
            if c.recv().contains("slept") {
                ok += 1;
            }
        }
        let took = started.elapsed();
        std::thread::sleep(Duration::from_millis(200));
        let after = rss_kib(c.pid());
        println!("\n### Memory (VmRSS of the router process)\n");
        println!("| state | router RSS |");
        println!("|---|---:|");
        println!("| idle, after 100 calls | {} |", mib(idle));
        println!("| {n} calls in flight (`sleep` {sleep_ms} ms) | {} |", mib(busy));
        println!("| after they all returned | {} |", mib(after));
        println!(
            "\n{ok}/{n} answered ok in {:.2} s; per in-flight call: {:.1} KiB; the fixture instance itself: {}",
            took.as_secs_f64(),
            (busy.saturating_sub(idle)) as f64 / n as f64,
            mib(fixture_busy)
        );
    }
}
