//! Label values: bounded names for methods, error codes, transports and causes, so no client
//! or server can grow the metrics without bound; and how an answer counts.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};

use super::{OTHER, TOOL_NAME_MAX, TOOLS_PER_SERVER};

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

/// How a forwarded call ended (`switchyard_calls_total{outcome}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The server answered with a JSON-RPC error.
    Error,
    /// A tools/call result with `isError: true`.
    ToolError,
    Rejected,
    /// The server ran it and a plugin's result hook withheld its result (denied it, or failed
    /// closed on it): the client got the plugin's reason instead.
    Withheld,
    Timeout,
    Cancelled,
    /// The instance died or its link was lost with the call on it.
    Lost,
    ShuttingDown,
}

impl Outcome {
    /// Every outcome, for tests that go through them all.
    pub const ALL: [Outcome; 9] = [
        Outcome::Ok,
        Outcome::Error,
        Outcome::ToolError,
        Outcome::Rejected,
        Outcome::Withheld,
        Outcome::Timeout,
        Outcome::Cancelled,
        Outcome::Lost,
        Outcome::ShuttingDown,
    ];

    /// The outcome as metrics label it and the audit log writes it.
    pub fn label(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::ToolError => "tool_error",
            Outcome::Rejected => "rejected",
            Outcome::Withheld => "withheld",
            Outcome::Timeout => "timeout",
            Outcome::Cancelled => "cancelled",
            Outcome::Lost => "lost",
            Outcome::ShuttingDown => "shutting_down",
        }
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

/// The tool names of one server that may become labels: those it declared, at most
/// [`TOOLS_PER_SERVER`] of them, each at most [`TOOL_NAME_MAX`] bytes; anything else is `other`.
/// Names are interned, so a call's label costs a lookup and a reference count, no allocation.
/// A name is declared by the server's own tools/list (asked at a call's label) or by any list a
/// client was given that names it ([`ToolNames::declare`]: a list answered from memory while the
/// server starts), so a tool the client was shown is never counted as `other` for want of the
/// server's own list.
#[derive(Default)]
pub struct ToolNames {
    names: RwLock<HashSet<Arc<str>>>,
}

impl ToolNames {
    /// The label for `tool`; `declared` says whether the server declared it (asked only for a
    /// name not seen before).
    pub fn label(&self, tool: &str, declared: impl FnOnce(&str) -> bool) -> Arc<str> {
        if let Some(n) = self.names.read().expect("lock").get(tool) {
            return n.clone();
        }
        if !declared(tool) {
            return other().clone();
        }
        self.intern(tool).unwrap_or_else(|| other().clone())
    }

    /// Names these tools in labels from now on: a list a client was given declared them
    /// (within the same bounds as any name).
    pub fn declare<'a>(&self, tools: impl IntoIterator<Item = &'a str>) {
        for tool in tools {
            if self.names.read().expect("lock").contains(tool) {
                continue;
            }
            let _ = self.intern(tool);
        }
    }

    /// Names in labels from now on every name `from` does (within the same bounds): a server
    /// whose config changed serves the clients of the one it replaced, and they call the tools
    /// they were shown there before its own tools/list comes.
    pub fn declare_all_of(&self, from: &ToolNames) {
        let names: Vec<Arc<str>> = from.names.read().expect("lock").iter().cloned().collect();
        self.declare(names.iter().map(|n| &**n));
    }

    /// The one shared text of `tool`, kept from now on; None past the bounds. Two callers naming
    /// a new tool at once get the same text (so the same series by address, see `handles`).
    fn intern(&self, tool: &str) -> Option<Arc<str>> {
        if tool.len() > TOOL_NAME_MAX {
            return None;
        }
        let mut names = self.names.write().expect("lock");
        if let Some(n) = names.get(tool) {
            return Some(n.clone());
        }
        if names.len() >= TOOLS_PER_SERVER {
            return None;
        }
        let name: Arc<str> = Arc::from(tool);
        names.insert(name.clone());
        Some(name)
    }
}

/// The label of a tool not named (shared: one address, so one series by address).
pub(super) fn other() -> &'static Arc<str> {
    static OTHER_NAME: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    OTHER_NAME.get_or_init(|| Arc::from(OTHER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_labels_are_declared_names_only_and_capped_per_server() {
        let names = ToolNames::default();
        assert_eq!(&*names.label("read_file", |_| true), "read_file");
        assert_eq!(&*names.label("made_up", |_| false), OTHER);
        assert_eq!(&*names.label(&"x".repeat(TOOL_NAME_MAX + 1), |_| true), OTHER);
        names.declare([&*"y".repeat(TOOL_NAME_MAX + 1)]);
        assert_eq!(&*names.label(&"y".repeat(TOOL_NAME_MAX + 1), |_| false), OTHER, "a long name declared");
        for i in 1..TOOLS_PER_SERVER {
            assert_eq!(&*names.label(&format!("t{i}"), |_| true), format!("t{i}"));
        }
        assert_eq!(&*names.label("one_too_many", |_| true), OTHER);
        names.declare(["declared_too_many"]);
        assert_eq!(&*names.label("declared_too_many", |_| false), OTHER, "a list declares within the cap");
        // A name already labelled stays so (and is not asked about again).
        assert_eq!(&*names.label("read_file", |_| panic!("asked again")), "read_file");
    }

    #[test]
    fn a_name_a_list_declared_is_its_label_before_the_server_declares_it() {
        let names = ToolNames::default();
        assert_eq!(&*names.label("echo", |_| false), OTHER, "not declared yet");
        names.declare(["echo", "add"]);
        let echo = names.label("echo", |_| panic!("a declared name is not asked about"));
        assert_eq!(&*echo, "echo");
        // Declared again (the list given again): the same text, so the same series by address.
        names.declare(["echo"]);
        assert!(Arc::ptr_eq(&echo, &names.label("echo", |_| false)));
        assert!(Arc::ptr_eq(&echo, &names.label("echo", |_| true)));
    }

    #[test]
    fn the_names_of_a_replaced_server_are_labels_of_the_one_that_replaced_it() {
        let old = ToolNames::default();
        names_of(&old, ["echo", "pid"]);
        assert_eq!(&*old.label("made_up", |_| false), OTHER);
        let new = ToolNames::default();
        new.declare(["add"]);
        new.declare_all_of(&old);
        for t in ["echo", "pid", "add"] {
            assert_eq!(&*new.label(t, |_| false), t);
        }
        assert_eq!(&*new.label("made_up", |_| false), OTHER, "only names, never `other`, carry over");
        // Within the cap: a full set takes no more.
        let full = ToolNames::default();
        for i in 0..TOOLS_PER_SERVER {
            assert_eq!(*full.label(&format!("t{i}"), |_| true), format!("t{i}"));
        }
        full.declare_all_of(&old);
        assert_eq!(&*full.label("echo", |_| false), OTHER);
    }

    fn names_of<'a>(names: &ToolNames, tools: impl IntoIterator<Item = &'a str>) {
        for t in tools {
            assert_eq!(&*names.label(t, |_| true), t);
        }
    }
}
