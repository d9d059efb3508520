//! `switchyard status`: what a running daemon is doing, as JSON or as text for people.

use std::io::Write;

use anyhow::{Context, bail};

use switchyard_router::control::{Hello, Reply};

use crate::commands::daemon::{Which, ask_daemon, locate, not_running};

/// `switchyard status`.
pub(crate) fn status_blocking(which: Which, json: bool) -> anyhow::Result<()> {
    let (config, socket) = locate(which.config.as_deref(), which.socket.as_deref())?;
    let status = match ask_daemon(&socket, &Hello::Status) {
        Ok(Reply::Status { status }) => status,
        Ok(other) => bail!("unexpected answer from the daemon on {}: {other:?}", socket.display()),
        Err(e) => {
            let why = config.as_deref().and_then(crate::commands::daemon::start::last_failure);
            match why {
                Some(why) => bail!("{}; {why}", not_running(&config, &socket, &e)),
                None => bail!("{}", not_running(&config, &socket, &e)),
            }
        }
    };
    let text = if json { format!("{status:#}\n") } else { render(&status) };
    let mut out = std::io::stdout();
    out.write_all(text.as_bytes()).and_then(|_| out.flush()).context("cannot write to stdout")
}

/// `text` with control characters escaped (`\n`, `\u{1b}`): a client names itself, and its
/// name must not add lines to `status` or drive the terminal.
/// A call in flight: what, whose, how old, where it waits, and the last it was heard of.
fn call_line(c: &serde_json::Value) -> String {
    let on = c["instance"].as_str().map(|i| format!(" on {i}")).unwrap_or_default();
    let silent = match c["silent_ms"].as_u64() {
        Some(s) if s >= 1000 => format!(", nothing from the link for {}", human_ms(s)),
        _ => String::new(),
    };
    let p = &c["progress"];
    let progress = match p["progress"].as_f64() {
        None => String::new(),
        Some(done) => {
            let of = p["total"].as_f64().map(|t| format!("/{t}")).unwrap_or_default();
            let message = p["message"].as_str().map(|m| format!(" ({})", printable(m))).unwrap_or_default();
            format!(", progress {done}{of}{message} {} ago", human_ms(p["age_ms"].as_u64().unwrap_or(0)))
        }
    };
    format!(
        "  call {} of session {}, {}: {}{on}{silent}{progress}",
        printable(c["call"].as_str().unwrap_or("?")),
        c["session"].as_str().unwrap_or("?"),
        human_ms(c["age_ms"].as_u64().unwrap_or(0)),
        printable(c["state"].as_str().unwrap_or("?"))
    )
}

fn printable(text: &str) -> String {
    text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect()
}

/// What the daemon says is wrong beside its servers (its config, its front, its plugins), one
/// sentence each, from a status.
pub(crate) fn problems(s: &serde_json::Value) -> Vec<&str> {
    let keys = ["config_error", "config_kept", "plugin_entries", "http_error", "plugin_problems", "group_errors"];
    let notes = keys.iter().flat_map(|key| match &s[key] {
        serde_json::Value::Array(items) => items.iter().filter_map(|i| i.as_str()).collect(),
        other => other.as_str().into_iter().collect::<Vec<_>>(),
    });
    notes.filter(|n| !n.is_empty()).collect()
}

/// The status as text for people.
fn render(s: &serde_json::Value) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    render_daemon(&mut out, s);
    let servers = s["servers"].as_array().cloned().unwrap_or_default();
    let retired = s["retired"].as_array().cloned().unwrap_or_default();
    for (server, old) in servers.iter().map(|v| (v, false)).chain(retired.iter().map(|v| (v, true))) {
        render_server(&mut out, server, old);
    }
    for b in s["broken"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "\nserver {}: cannot be used: {}",
            b["name"].as_str().unwrap_or("?"),
            b["error"].as_str().unwrap_or("")
        );
    }
    render_groups(&mut out, s);
    // Each remote server's sign-in, as the daemon holds it (never a token).
    let sign_ins: Vec<(&str, &serde_json::Value)> = servers
        .iter()
        .filter(|v| v["sign_in"].is_object())
        .map(|v| (v["name"].as_str().unwrap_or("?"), &v["sign_in"]))
        .collect();
    if !sign_ins.is_empty() {
        let _ = writeln!(out, "\nsign-in:");
        for (name, si) in sign_ins {
            let _ = writeln!(out, "  {name}: {}", sign_in_text(name, si, crate::commands::login::now_secs()));
        }
    }
    let recent = s["recent_errors"].as_array().cloned().unwrap_or_default();
    if !recent.is_empty() {
        let shown = recent.len().min(RECENT_SHOWN);
        let _ = writeln!(
            out,
            "
recent warnings and errors (the last {shown} of {}; all in --json):",
            recent.len()
        );
        for r in &recent[recent.len() - shown..] {
            let secs = r["at_ms"].as_u64().unwrap_or(0) / 1000 % 86_400;
            let _ = writeln!(
                out,
                "  {:02}:{:02}:{:02} UTC {} {}",
                secs / 3600,
                secs / 60 % 60,
                secs % 60,
                r["level"].as_str().unwrap_or("?"),
                printable(r["message"].as_str().unwrap_or(""))
            );
        }
    }
    out
}

/// The daemon itself: its version, files, audit log, traces, front, problems and plugins.
fn render_daemon(out: &mut String, s: &serde_json::Value) {
    use std::fmt::Write as _;
    let ms = |v: &serde_json::Value| human_ms(v.as_u64().unwrap_or(0));
    let _ = writeln!(
        out,
        "switchyard {} daemon, pid {}, up {}",
        s["version"].as_str().unwrap_or("?"),
        s["pid"],
        ms(&s["uptime_ms"])
    );
    for (label, key) in [("config", "config"), ("socket", "socket"), ("log", "log")] {
        let v = s[key].as_str().unwrap_or(if key == "log" { "stderr" } else { "-" });
        let _ = writeln!(out, "  {label}: {v}");
    }
    match s["audit"]["path"].as_str() {
        Some(path) => {
            let _ = writeln!(out, "  audit: {path}{} (switchyard calls)", audit_losses(&s["audit"]));
        }
        None => {
            let _ = writeln!(out, "  audit: off");
        }
    }
    // What the daemon exports, each signal with where it goes (a daemon of an earlier version
    // says nothing of metrics: no line for them then).
    for signal in ["traces", "metrics"] {
        let Some(v) = s.get(signal).or((signal == "traces").then_some(&serde_json::Value::Null)) else { continue };
        let shown = v["endpoint"].as_str().map_or("off".to_string(), |url| format!("{url} (OTLP over HTTP)"));
        let _ = writeln!(out, "  {signal}: {shown}");
    }
    if let Some(http) = s.get("http") {
        let _ = writeln!(
            out,
            "  http: {} ({} session{})",
            http["listen"].as_str().unwrap_or("?"),
            http["sessions"],
            if http["sessions"] == 1 { "" } else { "s" }
        );
    }
    for note in problems(s) {
        let _ = writeln!(out, "  problem: {}", printable(note));
    }
    let plugins: Vec<&str> = s["plugins"].as_array().into_iter().flatten().filter_map(|p| p.as_str()).collect();
    let _ = writeln!(
        out,
        "  plugins: {}{}",
        if plugins.is_empty() { "none".to_string() } else { plugins.join(", ") },
        s["plugins_dir"].as_str().map(|d| format!(" (from {d})")).unwrap_or_default()
    );
    for h in s["content_hooks"].as_array().into_iter().flatten() {
        let (plugin, hooks) = (h["plugin"].as_str().unwrap_or("?"), h["hooks"].as_str().unwrap_or("?"));
        let _ = writeln!(out, "    {}: {}", printable(plugin), printable(hooks));
    }
}

/// What one kind of client's budget did to a server's tool list: each name shortened (and the
/// tool it stands for), names left too long, a list longer than the client takes.
fn render_budget(out: &mut String, b: &serde_json::Value) {
    use std::fmt::Write as _;
    let client = b["client"].as_str().unwrap_or("?");
    let renamed = b["renamed"].as_array().cloned().unwrap_or_default();
    if !renamed.is_empty() {
        let _ = writeln!(
            out,
            "  {client} clients: {} tool name(s) shortened to fit {} characters with `{}`{}:",
            renamed.len(),
            b["name_max"],
            b["name_prefix"].as_str().unwrap_or(""),
            // Clients that take ASCII names only (Claude's): a name with another character too.
            if b["ascii_names"] == true { ", and only ASCII letters, digits, `_` and `-`" } else { "" }
        );
        for r in &renamed {
            let _ =
                writeln!(out, "    {} is {}", r["shown"].as_str().unwrap_or("?"), r["tool"].as_str().unwrap_or("?"));
        }
    }
    for name in b["unfit"].as_array().into_iter().flatten().filter_map(|n| n.as_str()) {
        let _ = writeln!(
            out,
            "  {client} clients: {name} is too long and could not be shortened (the name prefix leaves no room)"
        );
    }
    let (tools, max) = (b["tools"].as_u64().unwrap_or(0), b["tools_max"].as_u64().unwrap_or(0));
    if max > 0 && tools > max {
        let _ = writeln!(
            out,
            r#"  {client} clients: {tools} tools, over the {max} they take (expose = "search" gives them a search instead)"#
        );
    }
}

/// One server: what it runs, whom it serves, its instances, calls and sessions.
fn render_server(out: &mut String, server: &serde_json::Value, old: bool) {
    use std::fmt::Write as _;
    let ms = |v: &serde_json::Value| human_ms(v.as_u64().unwrap_or(0));
    if let Some(names) = server["client_env"].as_array() {
        let names: Vec<&str> = names.iter().filter_map(|n| n.as_str()).collect();
        let variants: Vec<&str> =
            server["variants"].as_array().into_iter().flatten().filter_map(|v| v.as_str()).collect();
        let _ = writeln!(
            out,
            "\nserver {}: {}\n  one server per distinct set of client values of {} (connect --env {}); {}",
            server["name"].as_str().unwrap_or("?"),
            server["target"].as_str().unwrap_or(""),
            names.join(", "),
            names.join(","),
            if variants.is_empty() { "none running".to_string() } else { format!("running: {}", variants.join(", ")) }
        );
        return;
    }
    let _ = writeln!(
        out,
        "\nserver {}{}: {}",
        server["name"].as_str().unwrap_or("?"),
        if old { " (old configuration, draining)" } else { "" },
        server["target"].as_str().unwrap_or("")
    );
    let _ = writeln!(out, "  started {} instance(s), {} restart(s)", server["starts"], server["restarts"]);
    if let Some(e) = server["last_error"].as_str() {
        let _ = writeln!(out, "  last error: {e}");
    }
    if let Some(base) = server["sibling_of"].as_str() {
        let _ = writeln!(out, "  instances for clients that differ from those of {base} (share = {})", server["share"]);
    }
    // Whom its instances serve: each client (clientInfo) and its kind.
    for c in server["clients"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  {}", client_text(c));
    }
    if let Some(hint) = server["one_at_a_time"].as_str() {
        let _ = writeln!(out, "  note: {hint}");
    }
    for b in server["budgets"].as_array().into_iter().flatten() {
        render_budget(out, b);
    }
    let instances = server["instances"].as_array().cloned().unwrap_or_default();
    if instances.is_empty() {
        let _ = writeln!(out, "  no instance running (one starts with the first call)");
    }
    for i in &instances {
        let at = match (i["pid"].as_u64(), i["url"].as_str()) {
            (Some(pid), _) => format!("pid {pid}"),
            (None, Some(url)) => url.to_string(),
            _ => "-".to_string(),
        };
        // An instance of one session's, client's or key's own says whose.
        let scope = match i["scope"].as_str() {
            None | Some("shared") => String::new(),
            Some(s) => format!(", {}", printable(s)),
        };
        let _ = writeln!(
            out,
            "  instance {} [{}{scope}] {at}, up {}, {} call(s) in flight{}",
            i["label"].as_str().unwrap_or("?"),
            i["pool"].as_str().unwrap_or("?"),
            ms(&i["uptime_ms"]),
            i["inflight"],
            if i["ready"] == true { "" } else { ", starting" }
        );
    }
    for c in server["calls"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "{}", call_line(c));
    }
    for c in server["sessions"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "  session {} {}, up {}, {} call(s) in flight, {} waiting",
            c["label"].as_str().unwrap_or("?"),
            c["client"].as_str().map_or("(client not initialised yet)".into(), printable),
            ms(&c["uptime_ms"]),
            c["inflight"],
            c["waiting"]
        );
    }
}

/// Where server `name`'s sign-in stands (`sign_in` of its status), and what to do about it.
/// What the audit log could not record, in words: lines lost (the queue full, or the file not
/// written) and calls a strict log refused; empty when nothing.
fn audit_losses(a: &serde_json::Value) -> String {
    let n = |key: &str| a[key].as_u64().unwrap_or(0);
    let (lost, full, failed, refused) = (n("lost"), n("lost_queue_full"), n("lost_write_failed"), n("refused"));
    let mut said = Vec::new();
    if lost > 0 {
        let why = match (full, failed) {
            (0, 0) => String::new(),
            (_, 0) => ": its queue was full, the disk was slower than the calls".to_string(),
            (0, _) => ": the file could not be written (the daemon log says why)".to_string(),
            (f, w) => format!(": {f} as its queue was full, {w} as the file could not be written"),
        };
        said.push(format!("{lost} lines of calls that ran lost{why}"));
    }
    if refused > 0 {
        said.push(format!("{refused} calls refused by strict = true, as their lines could not be written"));
    }
    if said.is_empty() { String::new() } else { format!(" ({})", said.join("; ")) }
}

fn sign_in_text(name: &str, si: &serde_json::Value, now: u64) -> String {
    use crate::commands::login::human_secs;
    let login = format!("`switchyard login {name}`");
    let error = printable(si["error"].as_str().unwrap_or("no cause recorded"));
    let expires_at = si["expires_at"].as_u64();
    let ago = expires_at.map(|at| human_secs(now.saturating_sub(at))).unwrap_or_default();
    match si["state"].as_str().unwrap_or("") {
        "signed_in" => {
            // Refreshed when next used: an idle token may expire unrefreshed, and that is fine.
            let refresh = if si["refreshable"] == true { "; it is refreshed when next used near then" } else { "" };
            match expires_at {
                Some(at) => format!("signed in (the token expires in {}{refresh})", human_secs(at.saturating_sub(now))),
                None => "signed in (the token has no stated expiry)".to_string(),
            }
        }
        "expired" => format!("signed in; the token expired {ago} ago and is refreshed at the next request"),
        "expired_for_good" => {
            format!("the token expired {ago} ago and there is no refresh token: the next request signs in ({login})")
        }
        "refresh_failing" => {
            format!("the token's refresh is failing: {error}; a refusal of the token signs in again ({login})")
        }
        "sign_in_failed" => format!("not signed in: the last sign-in failed: {error} ({login})"),
        _ => format!("not signed in ({login})"),
    }
}

/// How many of the recent warnings and errors the status text shows.
const RECENT_SHOWN: usize = 10;

fn human_ms(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        60_000..3_600_000 => format!("{} min", ms / 60_000),
        _ => format!("{:.1} h", ms as f64 / 3_600_000.0),
    }
}

/// One client a server's instances serve, from status's `clients`: `serves claude-code 2.1
/// (Claude Code; protocol 2025-11-25; roots, elicitation), 1 session now`.
fn client_text(c: &serde_json::Value) -> String {
    let name = c["name"].as_str().map_or("a client without clientInfo".into(), printable);
    let version = c["version"].as_str().map(|v| format!(" {}", printable(v))).unwrap_or_default();
    let title = c["title"].as_str().map(|t| format!("{}; ", printable(t))).unwrap_or_default();
    let joined = if c["joined"] == true {
        ", sharing instances started for another kind (the server cannot tell them apart)"
    } else {
        ""
    };
    let sessions = match c["sessions"].as_u64().unwrap_or(0) {
        0 => "no session now".to_string(),
        1 => "1 session now".to_string(),
        n => format!("{n} sessions now"),
    };
    format!("serves {name}{version} ({title}{}){joined}, {sessions}", printable(c["kind"].as_str().unwrap_or("?")))
}

/// The groups (`connect --group NAME`): their servers, and each session with where its
/// members stand.
fn render_groups(out: &mut String, s: &serde_json::Value) {
    use std::fmt::Write as _;
    for g in s["groups"].as_array().into_iter().flatten() {
        let members: Vec<String> = g["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| match (m["server"].as_str(), m["prefix"].as_str()) {
                (Some(s), Some(p)) if s != p => format!("{s} as {p}"),
                (s, _) => s.unwrap_or("?").to_string(),
            })
            .collect();
        let sessions = g["sessions"].as_array().cloned().unwrap_or_default();
        // The implicit group of every server is said only while someone uses it.
        if sessions.is_empty() && g["name"] == "all" {
            continue;
        }
        let _ = writeln!(
            out,
            "\ngroup {} ({}; tools named SERVER{}TOOL): {} session(s)",
            g["name"].as_str().unwrap_or("?"),
            members.join(", "),
            g["separator"].as_str().unwrap_or("__"),
            sessions.len()
        );
        for session in &sessions {
            let states: Vec<String> = session["members"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| {
                    let server = m["server"].as_str().unwrap_or("?");
                    match m["error"].as_str() {
                        Some(why) => format!("{server} down: {}", printable(why)),
                        None => format!("{server} {}", m["state"].as_str().unwrap_or("?")),
                    }
                })
                .collect();
            let _ = writeln!(
                out,
                "  {} {}: {}",
                session["label"].as_str().unwrap_or("?"),
                session["client"].as_str().map(printable).unwrap_or_else(|| "(client not initialised)".into()),
                states.join("; ")
            );
            // The group's merged list over the client's count budget (group sessions only).
            if session["budget"].is_object() {
                render_budget(out, &session["budget"]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_text_names_the_clients_a_server_serves_and_their_kind() {
        let s = serde_json::json!({"servers": [{"name": "memory~2", "sibling_of": "memory", "share": "profile",
            "target": "node m.js", "starts": 1, "restarts": 0, "instances": [],
            "clients": [{"name": "codex-mcp-client", "version": "0.169.0", "title": "Codex", "kind": "protocol 2025-06-18; elicitation",
                "sessions": 0, "joined": false},
                {"name": "mcp-test-client", "version": null, "title": null, "kind": "protocol 2025-06-18; no capabilities",
                "sessions": 2, "joined": true}]}]});
        let text = render(&s);
        for want in [
            "serves codex-mcp-client 0.169.0 (Codex; protocol 2025-06-18; elicitation), no session now",
            "serves mcp-test-client (protocol 2025-06-18; no capabilities), sharing instances started for another kind (the server cannot tell them apart), 2 sessions now",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
    }

    #[test]
    fn status_text_names_servers_instances_and_sessions() {
        let s = serde_json::json!({
            "pid": 7, "version": "0.1.0", "config": "/c.toml", "socket": "/s.sock", "log": null,
            "audit": {"path": "/st/c.audit.jsonl", "lost": 3, "lost_queue_full": 0, "lost_write_failed": 3, "refused": 716, "strict": true},
            "traces": {"endpoint": "http://otel:4318/v1/traces"}, "metrics": {"endpoint": "http://otel:4318/v1/metrics"}, "uptime_ms": 61_000, "plugins": ["hints.wasm", "redact.wasm"], "plugins_dir": "/p",
            "content_hooks": [{"plugin": "redact.wasm", "hooks": "on-result for methods [tools/call], every tool; enforce, fail closed, payloads up to 4096 KiB"}],
            "servers": [{"name": "fs", "target": "npx fs", "starts": 1, "restarts": 0, "last_error": null,
                "instances": [{"label": "fs#1", "pool": "default", "pid": 42, "url": null, "uptime_ms": 500, "inflight": 1, "ready": true, "scope": "shared"},
                    {"label": "fs#2", "pool": "default", "pid": 43, "url": null, "uptime_ms": 500, "inflight": 0, "ready": true, "scope": "client cursor (token ci)"}],
                "sessions": [{"label": "unix-3", "client": "claude-code 1.0", "uptime_ms": 1500, "inflight": 1, "waiting": 0}],
                "calls": [{"call": "tools/call `read_file`", "session": "unix-3", "age_ms": 12_300, "state": "in flight",
                    "instance": "fs#1", "silent_ms": 11_000,
                    "progress": {"progress": 40, "total": 100, "message": "reading\u{1b}[2J", "age_ms": 1_500}}]},
                {"name": "tools", "target": "python3 ${DIR}/s.py", "client_env": ["DIR", "KEY"], "variants": ["tools@1"]},
                {"name": "tools@1", "template": "tools", "target": "python3 ${DIR}/s.py", "starts": 1, "restarts": 0,
                 "last_error": null, "instances": [], "sessions": []}],
            "retired": [], "broken": [{"name": "web", "error": "TOKEN is not set"}],
            "recent_errors": [{"at_ms": 3_723_000, "level": "WARN", "message": "server=fs: pool `x` is not configured"}]
        });
        let text = render(&s);
        for want in [
            "pid 7",
            "up 1 min",
            "log: stderr",
            "traces: http://otel:4318/v1/traces (OTLP over HTTP)\n  metrics: http://otel:4318/v1/metrics (OTLP over HTTP)",
            "audit: /st/c.audit.jsonl (3 lines of calls that ran lost: the file could not be written (the daemon log says why); 716 calls refused by strict = true, as their lines could not be written)",
            "plugins: hints.wasm, redact.wasm (from /p)\n    redact.wasm: on-result for methods [tools/call], every tool; enforce, fail closed, payloads up to 4096 KiB",
            "server fs: npx fs",
            "fs#1 [default] pid 42",
            "fs#2 [default, client cursor (token ci)] pid 43",
            "call tools/call `read_file` of session unix-3, 12.3 s: in flight on fs#1, nothing from the link for 11.0 s, \
             progress 40/100 (reading\\u{1b}[2J) 1.5 s ago",
            "claude-code 1.0",
            "server web: cannot be used: TOKEN is not set",
            "server tools: python3 ${DIR}/s.py\n  one server per distinct set of client values of DIR, KEY (connect --env DIR,KEY); running: tools@1",
            "server tools@1: python3 ${DIR}/s.py\n  started 1 instance(s)",
            "recent warnings and errors (the last 1 of 1; all in --json):\n  01:02:03 UTC WARN server=fs: pool `x`",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
    }

    #[test]
    fn status_says_each_signal_it_exports_and_where() {
        let with = |traces: serde_json::Value, metrics: Option<serde_json::Value>| {
            let mut s = serde_json::json!({"pid": 7, "version": "0.1.0", "uptime_ms": 1, "plugins": [], "retired": [],
                "broken": [], "servers": [], "traces": traces});
            if let Some(m) = metrics {
                s["metrics"] = m;
            }
            render(&s)
        };
        let metrics_only =
            with(serde_json::Value::Null, Some(serde_json::json!({"endpoint": "https://o.example/v1/metrics"})));
        assert!(
            metrics_only.contains("  traces: off\n  metrics: https://o.example/v1/metrics (OTLP over HTTP)\n"),
            "{metrics_only}"
        );
        let neither = with(serde_json::Value::Null, Some(serde_json::Value::Null));
        assert!(neither.contains("  traces: off\n  metrics: off\n"), "{neither}");
        // A daemon of an earlier version has no `metrics`: nothing is said of them.
        let earlier = with(serde_json::json!({"endpoint": "http://o/v1/traces"}), None);
        assert!(
            earlier.contains("  traces: http://o/v1/traces (OTLP over HTTP)\n") && !earlier.contains("metrics"),
            "{earlier}"
        );
    }

    #[test]
    fn a_client_name_cannot_add_lines_or_drive_the_terminal() {
        let s = serde_json::json!({
            "pid": 7, "version": "0.1.0", "config": "/c.toml", "socket": "/s.sock", "log": null, "uptime_ms": 1,
            "plugins": [], "plugins_dir": "/p", "retired": [], "broken": [],
            "servers": [{"name": "fs", "target": "npx fs", "starts": 1, "restarts": 0, "last_error": null, "instances": [],
                "sessions": [{"label": "http-3", "client": "evil\n\nserver fake: ok\u{1b}[31mRED\r", "uptime_ms": 1, "inflight": 0, "waiting": 0}]}],
            "recent_errors": [{"at_ms": 1, "level": "WARN", "message": "line\nforged"}]
        });
        let text = render(&s);
        assert!(!text.contains('\u{1b}') && !text.contains('\r'), "{text:?}");
        assert!(!text.lines().any(|l| l.starts_with("server fake")), "a forged line:\n{text}");
        assert!(text.contains(r"evil\n\nserver fake: ok\u{1b}[31mRED\r"), "{text}");
        assert!(text.contains(r"line\nforged"), "{text}");
    }

    /// Each state of a sign-in reads as where it stands and what to do, with the cause where
    /// something failed, and the cause cannot add lines.
    #[test]
    fn each_sign_in_state_says_what_to_do() {
        let now = 1_000_000;
        let text = |si: serde_json::Value| sign_in_text("tracker", &si, now);
        use serde_json::json;
        assert_eq!(
            text(json!({"state": "signed_in", "expires_at": now + 3540, "refreshable": true})),
            "signed in (the token expires in 59 min; it is refreshed when next used near then)"
        );
        assert_eq!(
            text(json!({"state": "expired", "expires_at": now - 90, "refreshable": true})),
            "signed in; the token expired 90 s ago and is refreshed at the next request"
        );
        assert!(
            text(json!({"state": "expired_for_good", "expires_at": now - 7200, "refreshable": false}))
                .ends_with("there is no refresh token: the next request signs in (`switchyard login tracker`)")
        );
        let failing = text(json!({"state": "refresh_failing", "error": "refreshing the token failed: HTTP 400\nx"}));
        assert!(failing.contains(r"HTTP 400\nx") && failing.contains("switchyard login tracker"), "{failing}");
        assert_eq!(text(json!({"state": "not_signed_in"})), "not signed in (`switchyard login tracker`)");
        let failed = text(json!({"state": "sign_in_failed", "error": "the browser sign-in failed: nobody signed in"}));
        assert!(failed.starts_with("not signed in: the last sign-in failed: the browser"), "{failed}");
        // In the whole text: a section of its own, for servers that sign in.
        let s = json!({
            "pid": 7, "version": "0.1.0", "uptime_ms": 1, "plugins": [], "retired": [], "broken": [],
            "servers": [{"name": "tracker", "target": "https://h/mcp", "instances": [],
                "sign_in": {"state": "not_signed_in"}}, {"name": "fs", "target": "npx fs", "instances": [], "sign_in": null}],
        });
        let all = render(&s);
        assert!(all.contains("\nsign-in:\n  tracker: not signed in (`switchyard login tracker`)\n"), "{all}");
        assert!(!all.contains("  fs: "), "{all}");
    }
}
