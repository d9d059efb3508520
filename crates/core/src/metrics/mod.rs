//! The router's Prometheus metrics (`/metrics` of the HTTP front): what happened, counted as it
//! happens, and what is live (calls in flight, sessions, instances), read from the router at scrape.
//!
//! Names follow the OpenTelemetry MCP semantic conventions where they exist
//! (`mcp_server_operation_duration_seconds`, its buckets and attribute names); the rest are
//! `switchyard_*`. Labels stay bounded: a tool is named only when its server declared it (at
//! most [`TOOLS_PER_SERVER`] per server), else `other`; methods outside the MCP list are
//! `other`; session ids and tokens never become labels.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};

mod handles;
mod labels;
pub mod mirror;

use handles::{Handles, Key};
use labels::transport_name;
pub use labels::{
    Outcome, RetryReason, ToolNames, answer_outcome, code_label, death_cause, is_tool_error, method_label,
    network_transport,
};

/// The buckets the OpenTelemetry MCP conventions give for operation durations (seconds).
pub const OTEL_BUCKETS: [f64; 14] = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];
/// Gate and pool waits: 1 ms to 300 s.
const WAIT_BUCKETS: [f64; 12] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0];
/// One plugin's decision: 10 µs to 10 ms (and over).
const PLUGIN_BUCKETS: [f64; 10] = [0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01];
/// At most this many tool names per server become labels; later ones count as `other`.
pub const TOOLS_PER_SERVER: usize = 256;
/// A declared tool name longer than this counts as `other`.
const TOOL_NAME_MAX: usize = 64;
/// What an unnamed tool or method is counted as.
pub const OTHER: &str = "other";

type Hist<S> = Family<S, Histogram, fn() -> Histogram>;

fn otel_histogram() -> Histogram {
    Histogram::new(OTEL_BUCKETS)
}
fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BUCKETS)
}
fn plugin_histogram() -> Histogram {
    Histogram::new(PLUGIN_BUCKETS)
}

/// One MCP operation as the server side of switchyard saw it (OTel attribute names).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    server: Arc<str>,
    mcp_method_name: &'static str,
    gen_ai_tool_name: Arc<str>,
    /// Empty on success; the JSON-RPC code, or `tool_error` for a result with `isError: true`.
    error_type: &'static str,
    /// `pipe` (stdio), `unix`, `tcp` (HTTP).
    network_transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    server: Arc<str>,
    method: &'static str,
    tool: Arc<str>,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    server: Arc<str>,
    tool: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RetryLabels {
    server: Arc<str>,
    tool: Arc<str>,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GateLabels {
    server: Arc<str>,
    concurrency: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    server: String,
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeathLabels {
    server: String,
    pool: String,
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconnectLabels {
    server: String,
    transport: &'static str,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: Arc<str>,
    op: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginHookLabels {
    plugin: Arc<str>,
    phase: &'static str,
    verdict: &'static str,
    mode: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginFailureLabels {
    plugin: Arc<str>,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransportLabels {
    network_transport: &'static str,
}

/// A session's transport as switchyard names it: stdio, unix, http.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionTransport {
    transport: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabels {
    server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstanceLabels {
    server: String,
    pool: String,
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionLabels {
    server: String,
    transport: &'static str,
}

/// One finished call, as the engine reports it.
pub struct Call<'a> {
    pub server: &'a Arc<str>,
    /// The client's method (any string: only MCP's own become labels).
    pub method: &'a str,
    /// The tool label ([`ToolNames::label`]), for tools/call.
    pub tool: Option<&'a Arc<str>>,
    pub outcome: Outcome,
    /// The JSON-RPC error code of the answer, when it is an error (None for a refusal answered
    /// as a tool result).
    pub code: Option<i64>,
    /// The session's label (`stdio-3`, `unix-4`, `http-5`): its transport.
    pub session_label: &'a str,
    pub elapsed: Duration,
}

/// What is live in the router at a scrape (see [`Metrics::new`]).
#[derive(Default)]
pub struct Live {
    pub servers: Vec<LiveServer>,
    /// Per session: its server and its transport (`stdio`, `unix`, `http`), and calls waiting.
    pub sessions: Vec<(String, String, usize)>,
    /// Bytes queued for clients, all servers together.
    pub buffered_bytes: u64,
}

/// One server at a scrape. Variants and retired servers of the same name are summed.
pub struct LiveServer {
    pub name: String,
    pub inflight: usize,
    /// (pool, ready) per instance.
    pub instances: Vec<(String, bool)>,
    /// Calls between two attempts (being repeated).
    pub repeating: usize,
    /// Calls in flight whose link has carried nothing for them for a liveness window or more.
    pub silent: usize,
}

/// The router's metrics: one per router, shared by its servers.
pub struct Metrics {
    registry: Registry,
    server_op: Hist<OpLabels>,
    client_op: Hist<OpLabels>,
    calls: Family<CallLabels, Counter>,
    timeouts: Family<ToolLabels, Counter>,
    retries: Family<RetryLabels, Counter>,
    gate_wait: Hist<GateLabels>,
    instance_starts: Family<PoolLabels, Counter>,
    instance_deaths: Family<DeathLabels, Counter>,
    instance_restarts: Family<PoolLabels, Counter>,
    reconnects: Family<ReconnectLabels, Counter>,
    plugin_decision: Family<PluginLabels, Histogram, fn() -> Histogram>,
    plugin_failures: Family<PluginFailureLabels, Counter>,
    plugin_hooks: Family<PluginHookLabels, Counter>,
    sessions_opened: Family<SessionTransport, Counter>,
    session_duration: Hist<TransportLabels>,
    /// A call's series (its count, its operation time unless cancelled), kept once found.
    call_series: Handles<(Counter, Option<Histogram>)>,
    /// An attempt's operation time, kept once found.
    attempt_series: Handles<Histogram>,
    /// A gate's wait, kept once found.
    gate_series: Handles<Histogram>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// Reads the live gauges at each scrape.
struct LiveCollector(Box<dyn Fn() -> Live + Send + Sync>);

impl std::fmt::Debug for LiveCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveCollector")
    }
}

/// Encodes one gauge family made at scrape time.
fn gauge_family<S: EncodeLabelSet + Clone + std::hash::Hash + Eq + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (S, i64)>,
) -> Result<(), std::fmt::Error> {
    let family = Family::<S, Gauge>::default();
    for (labels, v) in values {
        family.get_or_create(&labels).inc_by(v);
    }
    let m = encoder.encode_descriptor(name, help, None, family.metric_type())?;
    family.encode(m)
}

impl Collector for LiveCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let live = (self.0)();
        let server = |n: &str| ServerLabels { server: n.to_string() };
        gauge_family(
            &mut encoder,
            "switchyard_calls_in_flight",
            "Calls sent to a server's instances and not yet answered",
            live.servers.iter().map(|s| (server(&s.name), s.inflight as i64)),
        )?;
        gauge_family(
            &mut encoder,
            "switchyard_calls_repeating",
            "Calls between two attempts: switchyard repeats them (safe to repeat, never delivered, or a policy's retry)",
            live.servers.iter().map(|s| (server(&s.name), s.repeating as i64)),
        )?;
        gauge_family(
            &mut encoder,
            "switchyard_calls_silent",
            "Calls in flight whose link has carried nothing for them for limits.liveness_ms or more (remote servers)",
            live.servers.iter().map(|s| (server(&s.name), s.silent as i64)),
        )?;
        let mut waiting: Vec<(ServerLabels, i64)> = live.servers.iter().map(|s| (server(&s.name), 0)).collect();
        waiting.extend(live.sessions.iter().map(|(s, _, w)| (server(s), *w as i64)));
        gauge_family(
            &mut encoder,
            "switchyard_calls_waiting",
            "Calls waiting for a server's gate or for an instance of its pool",
            waiting,
        )?;
        let instances = live.servers.iter().flat_map(|s| {
            s.instances.iter().map(|(pool, ready)| {
                let state = if *ready { "ready" } else { "starting" };
                (InstanceLabels { server: s.name.clone(), pool: pool.clone(), state }, 1)
            })
        });
        gauge_family(&mut encoder, "switchyard_instances", "Server instances running, by pool and state", instances)?;
        let sessions = live
            .sessions
            .iter()
            .map(|(s, t, _)| (SessionLabels { server: s.clone(), transport: transport_name(t) }, 1));
        gauge_family(&mut encoder, "switchyard_sessions", "Client sessions open, by server and transport", sessions)?;
        let buffered = Gauge::<i64>::default();
        buffered.set(live.buffered_bytes as i64);
        let m = encoder.encode_descriptor(
            "switchyard_buffered_bytes",
            "Bytes queued for clients that have not read them yet",
            None,
            buffered.metric_type(),
        )?;
        buffered.encode(m)
    }
}

impl Metrics {
    /// The metrics of one router; `live` is read at each scrape for the gauges.
    pub fn new(live: impl Fn() -> Live + Send + Sync + 'static) -> Metrics {
        Metrics::keeping(live, handles::CAP)
    }

    /// Metrics that look a call's labels up in each family every time, as they did before the
    /// series were kept: what the bench and the tests hold the kept series against.
    #[doc(hidden)]
    pub fn finding_series_each_call(live: impl Fn() -> Live + Send + Sync + 'static) -> Metrics {
        Metrics::keeping(live, 0)
    }

    /// `cap`: the series kept per kind (0: none).
    fn keeping(live: impl Fn() -> Live + Send + Sync + 'static, cap: usize) -> Metrics {
        let mut r = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            server_op: Family::new_with_constructor(otel_histogram),
            client_op: Family::new_with_constructor(otel_histogram),
            calls: Family::default(),
            timeouts: Family::default(),
            retries: Family::default(),
            gate_wait: Family::new_with_constructor(wait_histogram),
            instance_starts: Family::default(),
            instance_deaths: Family::default(),
            instance_restarts: Family::default(),
            reconnects: Family::default(),
            plugin_decision: Family::new_with_constructor(plugin_histogram),
            plugin_failures: Family::default(),
            plugin_hooks: Family::default(),
            sessions_opened: Family::default(),
            session_duration: Family::new_with_constructor(otel_histogram),
            call_series: Handles::new(cap),
            attempt_series: Handles::new(cap),
            gate_series: Handles::new(cap),
        };
        r.register_with_unit(
            "mcp_server_operation_duration",
            "MCP requests from a client to their response (OpenTelemetry mcp.server.operation.duration)",
            Unit::Seconds,
            m.server_op.clone(),
        );
        r.register_with_unit(
            "mcp_client_operation_duration",
            "switchyard's requests to a server, each attempt to its response (OpenTelemetry mcp.client.operation.duration)",
            Unit::Seconds,
            m.client_op.clone(),
        );
        r.register_with_unit(
            "mcp_server_session_duration",
            "Client sessions from start to end (OpenTelemetry mcp.server.session.duration)",
            Unit::Seconds,
            m.session_duration.clone(),
        );
        r.register("switchyard_calls", "Client requests answered, by how they ended", m.calls.clone());
        r.register("switchyard_timeouts", "Call attempts that ran out of time", m.timeouts.clone());
        r.register("switchyard_retries", "Calls tried again, by why", m.retries.clone());
        r.register_with_unit(
            "switchyard_gate_wait",
            "Time calls waited for a server's concurrency gate",
            Unit::Seconds,
            m.gate_wait.clone(),
        );
        r.register("switchyard_instance_starts", "Instances that finished their start", m.instance_starts.clone());
        r.register(
            "switchyard_instance_deaths",
            "Instances that ended without switchyard ending them",
            m.instance_deaths.clone(),
        );
        r.register(
            "switchyard_instance_restarts",
            "Instances started again after one ended without switchyard ending it",
            m.instance_restarts.clone(),
        );
        r.register(
            "switchyard_transport_reconnects",
            "Remote transports that reconnected, resumed a stream or began a new session",
            m.reconnects.clone(),
        );
        r.register_with_unit(
            "switchyard_plugin_decision",
            "Time one policy plugin took for one decision or annotation",
            Unit::Seconds,
            m.plugin_decision.clone(),
        );
        r.register("switchyard_plugin_failures", "Policy plugin calls that failed, by how", m.plugin_failures.clone());
        r.register(
            "switchyard_plugin_hook_verdicts",
            "Content hook answers other than continue (modify, deny, failed), by phase and mode (audit: logged only)",
            m.plugin_hooks.clone(),
        );
        r.register("switchyard_sessions_opened", "Client sessions opened, by transport", m.sessions_opened.clone());
        r.register(
            "switchyard_build",
            "The switchyard version serving",
            Info::new(vec![("version".to_string(), env!("CARGO_PKG_VERSION").to_string())]),
        );
        r.register_collector(Box::new(LiveCollector(Box::new(live))));
        Metrics { registry: r, ..m }
    }

    /// The metrics as OpenMetrics text (ends with `# EOF`).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String never fails");
        out
    }

    /// One forwarded call ended (the engine's report): counted by outcome and timed.
    pub fn call(&self, c: Call<'_>) {
        let method = method_label(c.method);
        let tool = c.tool.unwrap_or_else(|| empty_name());
        let error_type = match c.outcome {
            Outcome::Ok | Outcome::Cancelled => "",
            Outcome::ToolError => "tool_error",
            // A refusal answered as a tool result (`isError`), not as a JSON-RPC error.
            Outcome::Rejected | Outcome::Withheld if c.code.is_none() => "tool_error",
            _ => c.code.map(code_label).unwrap_or(OTHER),
        };
        let transport = network_transport(c.session_label);
        let seconds = c.elapsed.as_secs_f64();
        // A cancelled call has no response: no operation to time.
        let timed = c.outcome != Outcome::Cancelled;
        if timed {
            let op = (&**c.server, method, &**tool, error_type, transport);
            mirror_operation(mirror::Side::Server, op, seconds);
        }
        let find = || {
            let labels =
                CallLabels { server: c.server.clone(), method, tool: tool.clone(), outcome: c.outcome.label() };
            let calls = self.calls.get_or_create(&labels).clone();
            let op = timed.then(|| {
                let labels = OpLabels {
                    server: c.server.clone(),
                    mcp_method_name: method,
                    gen_ai_tool_name: tool.clone(),
                    error_type,
                    network_transport: transport,
                };
                self.server_op.get_or_create(&labels).clone()
            });
            (calls, op)
        };
        let key = Key::new(c.server, tool, method, error_type, transport, Some(c.outcome));
        self.call_series.with(key, [c.server, tool], find, |(calls, op)| {
            calls.inc();
            if let Some(op) = op {
                op.observe(seconds);
            }
        });
    }

    /// One attempt of a call on an instance got its answer, or none (`error_type`: the
    /// JSON-RPC code, `tool_error`, or how it failed; empty on success). `transport`: `pipe`
    /// for a local server, `tcp` for a remote one.
    pub fn attempt(
        &self,
        server: &Arc<str>,
        method: &str,
        tool: Option<&Arc<str>>,
        error_type: &'static str,
        transport: &'static str,
        took: Duration,
    ) {
        let method = method_label(method);
        let tool = tool.unwrap_or_else(|| empty_name());
        let seconds = took.as_secs_f64();
        mirror_operation(mirror::Side::Client, (&**server, method, &**tool, error_type, transport), seconds);
        let find = || {
            let labels = OpLabels {
                server: server.clone(),
                mcp_method_name: method,
                gen_ai_tool_name: tool.clone(),
                error_type,
                network_transport: transport,
            };
            self.client_op.get_or_create(&labels).clone()
        };
        let key = Key::new(server, tool, method, error_type, transport, None);
        self.attempt_series.with(key, [server, tool], find, |op| op.observe(seconds));
    }

    /// One attempt of a call ran out of time.
    pub fn timeout(&self, server: &Arc<str>, tool: Option<&Arc<str>>) {
        let tool = tool.cloned().unwrap_or_else(|| empty_name().clone());
        self.timeouts.get_or_create(&ToolLabels { server: server.clone(), tool }).inc();
    }

    /// A call is tried again.
    pub fn retry(&self, server: &Arc<str>, tool: Option<&Arc<str>>, reason: RetryReason) {
        let tool = tool.cloned().unwrap_or_else(|| empty_name().clone());
        let reason = match reason {
            RetryReason::Lost => "lost",
            RetryReason::Timeout => "timeout",
            RetryReason::NotDelivered => "not_delivered",
            RetryReason::Other => OTHER,
        };
        self.retries.get_or_create(&RetryLabels { server: server.clone(), tool, reason }).inc();
    }

    /// A call waited `waited` for the gate (`concurrency`: shared, exclusive, keyed).
    pub fn gate_wait(&self, server: &Arc<str>, concurrency: &'static str, waited: Duration) {
        let find = || self.gate_wait.get_or_create(&GateLabels { server: server.clone(), concurrency }).clone();
        let seconds = waited.as_secs_f64();
        self.gate_series.with(Key::gate(server, concurrency), [server, server], find, |wait| wait.observe(seconds));
    }

    pub fn instance_started(&self, server: &str, pool: &str) {
        self.instance_starts.get_or_create(&PoolLabels { server: server.to_string(), pool: pool.to_string() }).inc();
    }

    /// An instance ended without switchyard ending it (`status` as in `Death::status`).
    pub fn instance_died(&self, server: &str, pool: &str, status: &str) {
        let labels = DeathLabels { server: server.to_string(), pool: pool.to_string(), cause: death_cause(status) };
        self.instance_deaths.get_or_create(&labels).inc();
    }

    /// An instance was started in place of one that died.
    pub fn instance_restarted(&self, server: &str, pool: &str) {
        self.instance_restarts.get_or_create(&PoolLabels { server: server.to_string(), pool: pool.to_string() }).inc();
    }

    /// A remote transport reconnected (`transport`: streamable_http, sse; `kind`: resume,
    /// reinit_404, reconnect).
    pub fn reconnect(&self, server: &str, transport: &'static str, kind: &'static str) {
        self.reconnects.get_or_create(&ReconnectLabels { server: server.to_string(), transport, kind }).inc();
    }

    /// One plugin call (`op`: decide, annotate) took `took`; `failed`: how it failed (trap,
    /// deadline, error, broken).
    pub fn plugin_call(&self, plugin: &Arc<str>, op: &'static str, took: Duration, failed: Option<&'static str>) {
        self.plugin_decision.get_or_create(&PluginLabels { plugin: plugin.clone(), op }).observe(took.as_secs_f64());
        if let Some(kind) = failed {
            self.plugin_failures.get_or_create(&PluginFailureLabels { plugin: plugin.clone(), kind }).inc();
        }
    }

    /// A content hook of `plugin` answered `verdict` (modify, deny, failed) in `phase`
    /// (request, result); `mode`: enforce, or audit (nothing was changed).
    pub fn plugin_hook(&self, plugin: &Arc<str>, phase: &'static str, verdict: &'static str, mode: &'static str) {
        self.plugin_hooks.get_or_create(&PluginHookLabels { plugin: plugin.clone(), phase, verdict, mode }).inc();
    }

    /// A client session began on `transport` (the first part of its label).
    pub fn session_opened(&self, transport: &str) {
        self.sessions_opened.get_or_create(&SessionTransport { transport: transport_name(transport) }).inc();
    }

    /// A client session ended after `lasted`.
    pub fn session_closed(&self, transport: &str, lasted: Duration) {
        let network_transport = network_transport(transport);
        if let Some(m) = mirror::mirror() {
            m.session(network_transport, lasted.as_secs_f64());
        }
        self.session_duration.get_or_create(&TransportLabels { network_transport }).observe(lasted.as_secs_f64());
    }
}

/// An operation's time, to the mirror when there is one: (server, method, tool, error type,
/// transport), as the histograms label it.
fn mirror_operation(
    side: mirror::Side,
    (server, method, tool, error_type, transport): (&str, &'static str, &str, &'static str, &'static str),
    seconds: f64,
) {
    if let Some(m) = mirror::mirror() {
        m.operation(&mirror::Operation { side, server, method, tool, error_type, transport, seconds });
    }
}

/// The tool label of a call that is not a tools/call (shared, so no call allocates one).
fn empty_name() -> &'static Arc<str> {
    static EMPTY: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| Arc::from(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_local_endpoint_keeps_its_own_transport_name() {
        assert_eq!(network_transport("unix-4"), "unix");
        assert_eq!(network_transport("pipe-4"), "pipe");
        assert_eq!(transport_name("pipe"), "pipe");
        assert_eq!(crate::decision::Transport::of_label("pipe-3"), crate::decision::Transport::of_label("unix-3"));
        assert_ne!(crate::decision::Transport::of_label("pipe-3"), crate::decision::Transport::of_label("stdio-3"));
    }

    fn metrics() -> Metrics {
        Metrics::new(|| Live {
            servers: vec![LiveServer {
                name: "fs".into(),
                inflight: 2,
                instances: vec![("default".into(), true), ("default".into(), false)],
                repeating: 1,
                silent: 3,
            }],
            sessions: vec![("fs".into(), "stdio".into(), 1), ("fs".into(), "http".into(), 0)],
            buffered_bytes: 10,
        })
    }

    /// The value of the one sample line starting with `prefix` (labels included).
    fn sample(text: &str, prefix: &str) -> f64 {
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(prefix)).collect();
        assert_eq!(lines.len(), 1, "{prefix}: {lines:?}\n{text}");
        lines[0].rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn each_attempt_on_a_server_is_timed_on_the_client_side() {
        let m = metrics();
        let server: Arc<str> = Arc::from("fs");
        let tool: Arc<str> = Arc::from("read_file");
        m.attempt(&server, "tools/call", Some(&tool), "", "pipe", Duration::from_millis(30));
        m.attempt(&server, "tools/call", Some(&tool), "timeout", "pipe", Duration::from_secs(2));
        m.attempt(&server, "resources/read", None, "", "tcp", Duration::from_millis(5));
        let text = m.encode();
        let count = |labels: &str| sample(&text, &format!("mcp_client_operation_duration_seconds_count{{{labels}}}"));
        let read = r#"server="fs",mcp_method_name="tools/call",gen_ai_tool_name="read_file""#;
        assert_eq!(count(&format!(r#"{read},error_type="",network_transport="pipe""#)), 1.0);
        assert_eq!(count(&format!(r#"{read},error_type="timeout",network_transport="pipe""#)), 1.0);
        let resource =
            r#"server="fs",mcp_method_name="resources/read",gen_ai_tool_name="",error_type="",network_transport="tcp""#;
        assert_eq!(count(resource), 1.0);
        assert!(
            !text.contains("mcp_server_operation_duration_seconds_count"),
            "an attempt is not the client's operation"
        );
    }

    #[test]
    fn a_call_counts_by_outcome_and_times_its_operation_with_otel_labels() {
        let m = metrics();
        let server: Arc<str> = Arc::from("fs");
        let tool: Arc<str> = Arc::from("read_file");
        let call = |outcome, code| Call {
            server: &server,
            method: "tools/call",
            tool: Some(&tool),
            outcome,
            code,
            session_label: "stdio-7",
            elapsed: Duration::from_millis(30),
        };
        m.call(call(Outcome::Ok, None));
        m.call(call(Outcome::Ok, None));
        m.call(call(Outcome::ToolError, None));
        m.call(call(Outcome::Timeout, Some(-32001)));
        m.call(call(Outcome::Cancelled, None));
        // Refusals: one answered as a tool result, one as the error -32004.
        m.call(call(Outcome::Rejected, None));
        m.call(call(Outcome::Rejected, Some(-32004)));
        let text = m.encode();
        let calls = |o: &str| {
            sample(
                &text,
                &format!(r#"switchyard_calls_total{{server="fs",method="tools/call",tool="read_file",outcome="{o}"}}"#),
            )
        };
        assert_eq!((calls("ok"), calls("tool_error"), calls("timeout"), calls("cancelled")), (2.0, 1.0, 1.0, 1.0));
        assert_eq!(calls("rejected"), 2.0, "a refusal counts as rejected however it is answered");
        let op = |le: &str, error_type: &str| {
            let labels = format!(
                r#"server="fs",mcp_method_name="tools/call",gen_ai_tool_name="read_file",error_type="{error_type}",network_transport="pipe""#
            );
            sample(&text, &format!("mcp_server_operation_duration_seconds_bucket{{le=\"{le}\",{labels}}}"))
        };
        // 30 ms: above the 0.02 bucket, within 0.05.
        assert_eq!((op("0.02", ""), op("0.05", ""), op("+Inf", "")), (0.0, 2.0, 2.0));
        assert_eq!((op("+Inf", "tool_error"), op("+Inf", "-32001"), op("+Inf", "-32004")), (2.0, 1.0, 1.0));
        // Every OTel bucket is there; a cancelled call has no operation time.
        let buckets = text.lines().filter(|l| l.starts_with("mcp_server_operation_duration_seconds_bucket{"));
        assert_eq!(buckets.count(), 4 * (OTEL_BUCKETS.len() + 1));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn live_gauges_are_read_at_scrape() {
        let text = metrics().encode();
        assert_eq!(sample(&text, r#"switchyard_calls_in_flight{server="fs"}"#), 2.0);
        assert_eq!(sample(&text, r#"switchyard_calls_repeating{server="fs"}"#), 1.0);
        assert_eq!(sample(&text, r#"switchyard_calls_silent{server="fs"}"#), 3.0);
        assert_eq!(sample(&text, r#"switchyard_calls_waiting{server="fs"}"#), 1.0);
        assert_eq!(sample(&text, r#"switchyard_instances{server="fs",pool="default",state="ready"}"#), 1.0);
        assert_eq!(sample(&text, r#"switchyard_instances{server="fs",pool="default",state="starting"}"#), 1.0);
        assert_eq!(sample(&text, r#"switchyard_sessions{server="fs",transport="http"}"#), 1.0);
        assert_eq!(sample(&text, r#"switchyard_sessions{server="fs",transport="stdio"}"#), 1.0);
        assert_eq!(sample(&text, "switchyard_buffered_bytes "), 10.0);
    }

    /// The series cache (`handles`) is keyed by the labels' addresses: a call counted as `other`
    /// before its tool was declared leaves a cached `other` series that the declared name's
    /// later calls never reuse.
    #[test]
    fn a_cached_other_series_is_not_reused_once_the_tool_is_declared() {
        let m = metrics();
        let (server, names) = (Arc::<str>::from("fs"), ToolNames::default());
        let count = |tool: Arc<str>| {
            m.call(Call {
                server: &server,
                method: "tools/call",
                tool: Some(&tool),
                outcome: Outcome::Ok,
                code: None,
                session_label: "unix-1",
                elapsed: Duration::from_millis(1),
            })
        };
        count(names.label("echo", |_| false));
        names.declare(["echo"]);
        count(names.label("echo", |_| false));
        count(names.label("echo", |_| false));
        let text = m.encode();
        let calls = |t: &str| {
            sample(
                &text,
                &format!(r#"switchyard_calls_total{{server="fs",method="tools/call",tool="{t}",outcome="ok"}}"#),
            )
        };
        assert_eq!((calls("other"), calls("echo")), (1.0, 2.0), "{text}");
    }

    #[test]
    fn unknown_methods_and_codes_are_bounded() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("x/anything-a-client-sends"), OTHER);
        assert_eq!(code_label(-32601), "-32601");
        assert_eq!(code_label(12345), OTHER);
        assert_eq!((network_transport("stdio-1"), network_transport("http-2")), ("pipe", "tcp"));
    }

    #[test]
    fn answers_count_as_errors_with_their_code_and_tool_errors_are_seen() {
        assert_eq!(answer_outcome(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), (Outcome::Ok, None));
        let e = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#;
        assert_eq!(answer_outcome(e), (Outcome::Error, Some(-32601)));
        assert!(is_tool_error(r#"{"content":[],"isError":true}"#));
        assert!(is_tool_error(r#"{"isError": true, "content":[]}"#));
        assert!(!is_tool_error(r#"{"content":[{"type":"text","text":"\"isError\":true"}],"isError":false}"#));
        assert!(is_tool_error("{\"content\":[],\"isError\" :\n\ttrue}"), "any JSON white space");
        assert!(!is_tool_error(r#"{"isError":false,"content":[{"type":"text","text":"isError"}]}"#));
        assert!(!is_tool_error(r#"{"isError":"true"}"#), "a string is no boolean");
    }
}
