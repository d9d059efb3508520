//! The series a call counts in, kept once found: a call names its server and tool by the
//! router's shared texts (`Arc<str>`, interned per server) and its method, outcome, error and
//! transport by fixed words (`&'static str`), so "the same labels as last time" is a question
//! of addresses, asked once, instead of a label set hashed and compared in each family.
//!
//! A key is the addresses of the texts; an entry holds its `Arc<str>`s, so no other text can
//! take an address while a key names it: the same address is the same text. The same text at
//! another address (a server removed and added again, a tool list read anew) is another key for
//! the same series. The entries are bounded: at [`CAP`] they are dropped and found again.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, RwLock};

/// Entries kept at most, per kind (a call's, an attempt's, a gate wait's); about 150 bytes each.
pub(super) const CAP: usize = 4096;

/// A fixed word by where it is (address and length: two words at one address are one word).
fn word(w: &'static str) -> (usize, usize) {
    (w.as_ptr() as usize, w.len())
}

/// A shared text by where it is (its entry holds it there).
fn text(t: &Arc<str>) -> usize {
    Arc::as_ptr(t) as *const u8 as usize
}

/// The labels of a call or an attempt, by address.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Key {
    server: usize,
    tool: usize,
    method: (usize, usize),
    error_type: (usize, usize),
    transport: (usize, usize),
    /// A call's outcome (`Outcome as u8`); an attempt has none.
    outcome: u8,
}

impl Key {
    pub(super) fn new(
        server: &Arc<str>,
        tool: &Arc<str>,
        method: &'static str,
        error_type: &'static str,
        transport: &'static str,
        outcome: Option<super::Outcome>,
    ) -> Key {
        Key {
            server: text(server),
            tool: text(tool),
            method: word(method),
            error_type: word(error_type),
            transport: word(transport),
            outcome: outcome.map_or(u8::MAX, |o| o as u8),
        }
    }

    /// The labels of a server's gate wait (`concurrency`: shared, exclusive, keyed).
    pub(super) fn gate(server: &Arc<str>, concurrency: &'static str) -> Key {
        Key {
            server: text(server),
            tool: 0,
            method: (0, 0),
            error_type: word(concurrency),
            transport: (0, 0),
            outcome: u8::MAX,
        }
    }
}

/// The series of one key, with the texts its key points at.
struct Entry<V> {
    series: V,
    _held: [Arc<str>; 2],
}

/// Found series by key; `cap` 0 keeps none (each call looks its labels up in the families).
pub(super) struct Handles<V> {
    entries: RwLock<HashMap<Key, Entry<V>, BuildHasherDefault<Words>>>,
    cap: usize,
}

impl<V> Handles<V> {
    pub(super) fn new(cap: usize) -> Handles<V> {
        Handles { entries: RwLock::default(), cap }
    }

    /// Runs `count` on the series of `key`, found by `find` the first time (`held`: the texts
    /// `key` points at).
    pub(super) fn with(&self, key: Key, held: [&Arc<str>; 2], find: impl FnOnce() -> V, count: impl FnOnce(&V)) {
        if self.cap == 0 {
            return count(&find());
        }
        if let Some(e) = self.entries.read().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return count(&e.series);
        }
        let series = find();
        count(&series);
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= self.cap {
            entries.clear();
        }
        entries.entry(key).or_insert(Entry { series, _held: held.map(Arc::clone) });
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.read().expect("lock").len()
    }
}

/// A hasher for keys of machine words (FxHash's step; the rotation at the end brings the
/// mixed high bits down to where the table looks).
#[derive(Default)]
struct Words(u64);

impl Hasher for Words {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0xf135_7aea_2e62_a9c5);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use proptest::prelude::*;

    use super::super::{Call, Live, Metrics, OTHER, Outcome, TOOLS_PER_SERVER, ToolNames};
    use super::*;

    fn metrics(cap: usize) -> Metrics {
        Metrics::keeping(Live::default, cap)
    }

    fn call<'a>(server: &'a Arc<str>, tool: Option<&'a Arc<str>>, outcome: Outcome) -> Call<'a> {
        let method = if tool.is_some() { "tools/call" } else { "resources/read" };
        Call { server, method, tool, outcome, code: None, session_label: "stdio-1", elapsed: Duration::from_millis(3) }
    }

    /// The count of `switchyard_calls_total` with exactly these labels (0 when absent).
    fn calls(m: &Metrics, server: &str, tool: &str, outcome: &str) -> u64 {
        let labels = format!(r#"{{server="{server}",method="tools/call",tool="{tool}",outcome="{outcome}"}}"#);
        let text = m.encode();
        let line = text.lines().find(|l| l.starts_with(&format!("switchyard_calls_total{labels} ")));
        line.map_or(0, |l| l.rsplit(' ').next().unwrap().parse().unwrap())
    }

    #[test]
    fn a_kept_series_counts_under_its_own_labels_only() {
        let m = metrics(CAP);
        // Two servers with a tool of the same name: each counts under its own server.
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let (names_a, names_b) = (ToolNames::default(), ToolNames::default());
        let (echo_a, echo_b) = (names_a.label("echo", |_| true), names_b.label("echo", |_| true));
        for _ in 0..3 {
            m.call(call(&a, Some(&echo_a), Outcome::Ok));
        }
        m.call(call(&b, Some(&echo_b), Outcome::Ok));
        m.call(call(&b, Some(&echo_b), Outcome::Error));
        assert_eq!((calls(&m, "a", "echo", "ok"), calls(&m, "b", "echo", "ok")), (3, 1));
        assert_eq!((calls(&m, "b", "echo", "error"), calls(&m, "a", "echo", "error")), (1, 0));
        // A tool past the server's cap counts as `other`, with the other tools of its kind.
        for i in 1..TOOLS_PER_SERVER {
            names_a.label(&format!("t{i}"), |_| true);
        }
        let late = names_a.label("late", |_| true);
        let later = names_a.label("later", |_| true);
        m.call(call(&a, Some(&late), Outcome::Ok));
        m.call(call(&a, Some(&later), Outcome::Ok));
        assert_eq!((calls(&m, "a", OTHER, "ok"), calls(&m, "a", "late", "ok")), (2, 0));
    }

    #[test]
    fn a_server_removed_and_added_again_counts_under_the_name_it_has_now() {
        let m = metrics(CAP);
        let tool: Arc<str> = Arc::from("echo");
        for name in ["gone", "back", "gone", "anew", "gone", "more"] {
            // Each server's name is a new text: with nothing holding the last one, the new one
            // would likely take its address (the families hold the first text of each name, not
            // the second `gone`).
            let server: Arc<str> = Arc::from(name);
            m.call(call(&server, Some(&tool), Outcome::Ok));
            m.attempt(&server, "tools/call", Some(&tool), "", "pipe", Duration::from_millis(1));
        }
        let count = |s| calls(&m, s, "echo", "ok");
        assert_eq!((count("gone"), count("back"), count("anew"), count("more")), (3, 1, 1, 1));
        let text = m.encode();
        let attempts = |s: &str| {
            let l = format!(
                r#"mcp_client_operation_duration_seconds_count{{server="{s}",mcp_method_name="tools/call",gen_ai_tool_name="echo",error_type="",network_transport="pipe"}} "#
            );
            text.lines().find(|x| x.starts_with(&l)).map(|x| x.rsplit(' ').next().unwrap().to_string())
        };
        assert_eq!((attempts("gone").as_deref(), attempts("more").as_deref()), (Some("3"), Some("1")));
    }

    #[test]
    fn the_kept_series_are_bounded() {
        let m = metrics(8);
        let tool: Arc<str> = Arc::from("echo");
        for n in 0..100 {
            let server: Arc<str> = Arc::from(format!("s{n}").as_str());
            m.call(call(&server, Some(&tool), Outcome::Ok));
            assert!(m.call_series.len() <= 8);
        }
        assert_eq!(calls(&m, "s99", "echo", "ok"), 1);
    }

    /// One step of a router's life: a call or an attempt on a server's tool, or a server
    /// removed and added again (its name and tool labels made anew).
    #[derive(Debug, Clone)]
    enum Step {
        Call { server: usize, tool: Option<usize>, outcome: usize, code: Option<i64>, session: usize },
        Attempt { server: usize, tool: Option<usize>, error_type: usize, transport: usize },
        Gate { server: usize, concurrency: usize },
        Readd { server: usize },
    }

    const OUTCOMES: [Outcome; 9] = Outcome::ALL;

    fn step() -> impl Strategy<Value = Step> {
        let tool = || proptest::option::of(0usize..6);
        let code = proptest::option::of(prop_oneof![Just(-32001i64), Just(-32601), any::<i64>()]);
        prop_oneof![
            6 => (0usize..3, tool(), 0..OUTCOMES.len(), code, 0usize..4).prop_map(|(server, tool, outcome, code, session)| {
                Step::Call { server, tool, outcome, code, session }
            }),
            3 => (0usize..3, tool(), 0usize..4, 0usize..2)
                .prop_map(|(server, tool, error_type, transport)| Step::Attempt { server, tool, error_type, transport }),
            2 => (0usize..3, 0usize..3).prop_map(|(server, concurrency)| Step::Gate { server, concurrency }),
            1 => (0usize..3).prop_map(|server| Step::Readd { server }),
        ]
    }

    /// A server as the router holds it: its name and its tool labels.
    struct Server {
        name: Arc<str>,
        tools: ToolNames,
    }

    impl Server {
        fn new(n: usize) -> Server {
            let tools = ToolNames::default();
            // Server 0 has no room left: its tools count as `other`.
            if n == 0 {
                for i in 0..TOOLS_PER_SERVER {
                    tools.label(&format!("x{i}"), |_| true);
                }
            }
            Server { name: Arc::from(["a", "b", "c"][n]), tools }
        }

        fn tool(&self, n: Option<usize>) -> Option<Arc<str>> {
            // Tool 5 is one the server never declared.
            n.map(|n| self.tools.label(["echo", "add", "read", "write", "list", "made_up"][n], |t| t != "made_up"))
        }
    }

    fn run(m: &Metrics, steps: &[Step]) {
        let mut servers: Vec<Server> = (0..3).map(Server::new).collect();
        for s in steps {
            match *s {
                Step::Call { server, tool, outcome, code, session } => {
                    let tool = servers[server].tool(tool);
                    m.call(Call {
                        server: &servers[server].name,
                        method: if tool.is_some() { "tools/call" } else { ["ping", "x/y"][session % 2] },
                        tool: tool.as_ref(),
                        outcome: OUTCOMES[outcome],
                        code,
                        session_label: ["stdio-1", "unix-2", "http-3", "pipe-4"][session],
                        elapsed: Duration::from_micros(137 * (session as u64 + 1)),
                    });
                }
                Step::Attempt { server, tool, error_type, transport } => {
                    let tool = servers[server].tool(tool);
                    let method = if tool.is_some() { "tools/call" } else { "prompts/get" };
                    let error_type = ["", "timeout", "tool_error", "-32601"][error_type];
                    let took = Duration::from_micros(90 * (transport as u64 + 1));
                    m.attempt(
                        &servers[server].name,
                        method,
                        tool.as_ref(),
                        error_type,
                        ["pipe", "tcp"][transport],
                        took,
                    );
                }
                Step::Gate { server, concurrency } => {
                    let waited = Duration::from_micros(70 * (concurrency as u64 + 1));
                    m.gate_wait(&servers[server].name, ["shared", "exclusive", "keyed"][concurrency], waited);
                }
                Step::Readd { server } => servers[server] = Server::new(server),
            }
        }
    }

    /// The exported samples, in order (a family lists its series in no set order).
    fn series(m: &Metrics) -> Vec<String> {
        let mut lines: Vec<String> = m.encode().lines().map(str::to_string).collect();
        lines.sort();
        lines
    }

    proptest! {
        /// Whatever happens, the kept series export what looking the labels up each time does.
        #[test]
        fn kept_series_export_what_finding_them_each_call_does(steps in prop::collection::vec(step(), 0..120), cap in 1usize..6) {
            let (kept, found, unbounded) = (metrics(cap), metrics(0), metrics(CAP));
            run(&kept, &steps);
            run(&found, &steps);
            run(&unbounded, &steps);
            prop_assert_eq!(series(&kept), series(&found));
            prop_assert_eq!(series(&unbounded), series(&found));
        }
    }
}
