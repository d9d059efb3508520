//! Attribute keys: the OpenTelemetry MCP conventions' (from the semantic-conventions crate, not
//! typed here) and switchyard's own, under `switchyard.*`.

/// The conventions' keys, taken from the crate. It marks the GenAI and MCP ones deprecated only
/// because they moved to a repository of their own; the keys are the same.
macro_rules! semconv {
    ($($name:ident),* $(,)?) => {
        $(
            #[allow(deprecated)]
            pub const $name: &str = opentelemetry_semantic_conventions::attribute::$name;
        )*
    };
}

semconv!(
    ERROR_TYPE,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROMPT_NAME,
    GEN_AI_TOOL_NAME,
    JSONRPC_REQUEST_ID,
    MCP_METHOD_NAME,
    MCP_PROTOCOL_VERSION,
    MCP_RESOURCE_URI,
    MCP_SESSION_ID,
    NETWORK_TRANSPORT,
    RPC_RESPONSE_STATUS_CODE,
);

/// The conventions' metric names, taken from the crate.
macro_rules! semconv_metrics {
    ($($name:ident),* $(,)?) => {
        $(
            #[allow(deprecated)]
            pub const $name: &str = opentelemetry_semantic_conventions::metric::$name;
        )*
    };
}

semconv_metrics!(MCP_CLIENT_OPERATION_DURATION, MCP_SERVER_OPERATION_DURATION, MCP_SERVER_SESSION_DURATION);

/// `gen_ai.operation.name` of a `tools/call`.
pub const GEN_AI_OPERATION_EXECUTE_TOOL: &str = "execute_tool";

/// `network.transport` of stdio (the client's, or a server process's).
pub const TRANSPORT_PIPE: &str = "pipe";
/// `network.transport` of the daemon's Unix socket or named pipe.
pub const TRANSPORT_UNIX: &str = "unix";
/// `network.transport` of HTTP (the front, a remote server).
pub const TRANSPORT_TCP: &str = "tcp";

/// The server (its name in the config) a session or call is for.
pub const SWITCHYARD_SERVER: &str = "switchyard.server";
/// The client's name, from its `clientInfo`.
pub const SWITCHYARD_CLIENT_NAME: &str = "switchyard.client.name";
/// The decision's concurrency: `shared`, `exclusive` or `keyed`.
pub const SWITCHYARD_CONCURRENCY: &str = "switchyard.decision.concurrency";
/// The keys of a `keyed` decision.
pub const SWITCHYARD_KEYS: &str = "switchyard.decision.keys";
/// The pool the call ran on.
pub const SWITCHYARD_POOL: &str = "switchyard.decision.pool";
/// The call's timeout in milliseconds.
pub const SWITCHYARD_TIMEOUT_MS: &str = "switchyard.decision.timeout_ms";
/// The retries the decision allows.
pub const SWITCHYARD_RETRY_ATTEMPTS: &str = "switchyard.decision.retry.attempts";
/// The plugins that decided, in chain order, each as `NAME sha256:HASH` (of the file that ran).
pub const SWITCHYARD_PLUGINS: &str = "switchyard.decision.plugins";
/// The instance a request went to.
pub const SWITCHYARD_INSTANCE: &str = "switchyard.instance";
/// The attempt a request is (1 the first).
pub const SWITCHYARD_ATTEMPT: &str = "switchyard.attempt";
/// How many attempts a call took.
pub const SWITCHYARD_ATTEMPTS: &str = "switchyard.attempts";
/// Milliseconds the call waited for its gate, over its attempts.
pub const SWITCHYARD_GATE_WAIT_MS: &str = "switchyard.wait.gate_ms";
/// Milliseconds the call waited for an instance of its pool, over its attempts.
pub const SWITCHYARD_QUEUE_WAIT_MS: &str = "switchyard.wait.queue_ms";
/// The plugin that refused the call.
pub const SWITCHYARD_REFUSED_BY: &str = "switchyard.decision.refused_by";
/// The call was cancelled (by its client, or by switchyard at shutdown).
pub const SWITCHYARD_CANCELLED: &str = "switchyard.cancelled";
