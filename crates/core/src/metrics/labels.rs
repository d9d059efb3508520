//! Label values: bounded names for methods, error codes, transports and causes, so no client
//! or server can grow the metrics without bound; and how an answer counts.

use super::{OTHER, Outcome};

/// The transport of a session label's first part, as a bounded label value.
pub(super) fn transport_name(t: &str) -> &'static str {
    match t {
        "stdio" => "stdio",
        "unix" => "unix",
        "pipe" => "pipe",
        "http" => "http",
        _ => OTHER,
    }
}

/// OTel `network.transport` of a session, from its label (`stdio-3`, `unix-4`, `http-5`).
pub fn network_transport(session_label: &str) -> &'static str {
    match session_label.split('-').next().unwrap_or("") {
        "stdio" | "pipe" => "pipe",
        "unix" => "unix",
        "http" => "tcp",
        _ => OTHER,
    }
}

/// An MCP method as a label: one of MCP's own, else `other` (clients may send anything).
pub fn method_label(method: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "resources/subscribe",
        "resources/unsubscribe",
        "completion/complete",
        "logging/setLevel",
        "sampling/createMessage",
        "elicitation/create",
        "roots/list",
        "tasks/get",
        "tasks/list",
        "tasks/cancel",
        "tasks/result",
    ];
    KNOWN.iter().find(|k| **k == method).copied().unwrap_or(OTHER)
}

/// OTel `error.type` of a JSON-RPC error code: the code as text for the codes MCP and switchyard
/// use, else `other` (a server may send any integer).
pub fn code_label(code: i64) -> &'static str {
    match code {
        -32700 => "-32700",
        -32600 => "-32600",
        -32601 => "-32601",
        -32602 => "-32602",
        -32603 => "-32603",
        -32000 => "-32000",
        -32001 => "-32001",
        -32002 => "-32002",
        -32003 => "-32003",
        -32004 => "-32004",
        -32020 => "-32020",
        -32021 => "-32021",
        -32022 => "-32022",
        -32042 => "-32042",
        _ => OTHER,
    }
}

/// Why a call was tried again (`switchyard_retries_total{reason}`).
#[derive(Clone, Copy)]
pub enum RetryReason {
    Lost,
    Timeout,
    NotDelivered,
    Other,
}

/// How an answer the router made counts: an error (with its code) or a success.
pub fn answer_outcome(line: &str) -> (Outcome, Option<i64>) {
    match crate::codec::parse(line) {
        Ok(env) if env.is_error => {
            let code = serde_json::from_str::<serde_json::Value>(line).ok().and_then(|v| v["error"]["code"].as_i64());
            (Outcome::Error, code)
        }
        _ => (Outcome::Ok, None),
    }
}

/// Whether a tools/call result says the tool failed (`isError: true`, MCP's tool error).
pub fn is_tool_error(result: &str) -> bool {
    // Read on every tools/call's answer: one pass with a searcher built once, not one per call.
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(br#""isError""#));
    let r = result.as_bytes();
    KEY.find_iter(r).any(|at| {
        let after = r[at + KEY.needle().len()..].trim_ascii_start();
        after.strip_prefix(b":").is_some_and(|v| v.trim_ascii_start().starts_with(b"true"))
    })
}

/// Why an instance ended without switchyard ending it.
pub fn death_cause(status: &str) -> &'static str {
    if status.contains("signal") {
        "signal"
    } else if status.starts_with("exit") {
        "exit"
    } else {
        "link_lost"
    }
}
