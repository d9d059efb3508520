//! Recorded calls (`calls.jsonl`) and `switchyard plugin test`: replay them against a plugin in
//! the real host and show a diff for every answer that differs from the recorded one.
//!
//! One JSON object per line, either a call and the verdict expected for it:
//! `{"call": {"server", "method", "tool", "arguments", "annotations", "attempt"}, "client":
//! "<session>", "current": <decision>, "expect": {"verdict": "continue"|"stop", "decision":
//! <decision>} | {"verdict": "reject", "reason": "..."}}`
//! or a listed tool, the client it is listed to, and how that client is expected to see it:
//! `{"tool": {"server", "name", "kind", "title", "description", "annotations", "client", "era"},
//! "current": <hints>, "expect": {"hidden", "name", "title", "description", "hints": <hints>}}`
//! (a 0.2 plugin is asked `list-tool` for that client; a 0.1 plugin `annotate`). An `expect`
//! field left out is expected unchanged from what the server listed (`hints`: from `current`).
//! A decision is `{"concurrency": "shared"|"exclusive"|{"keyed": [..]}, "pool", "timeout_ms",
//! "retry": {"attempts", "backoff_ms"}, "placement": "shared"|"client"|"session"|{"key": ".."}}`,
//! hints use the MCP names (`readOnlyHint`, ...); an
//! absent field is "not said". `current` is optional (default: nothing decided, the declared
//! hints). Blank lines and lines starting with `//` are skipped.
//!
//! A 0.3 plugin's content hooks are replayed from lines that carry a call's `params` or its
//! `result` (see [`super::hooked`]).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};

use super::hooked::{self, HookCase};
use crate::check::{call_from_json, caller_from_json, entry_and_config, optional_string};
use crate::wasm::{self, CallArgs, Contract, Limits, Verdict};
use crate::{Kind, ListedTool, Listing};
use switchyard_core::decision::{CallInfo, Caller, Concurrency, Decision, Hints, Placement, Retry};

/// One recorded line: what to ask the plugin, and the answer recorded for it.
#[derive(Debug, Clone)]
pub enum Case {
    Decide {
        call: Box<CallInfo>,
        current: Decision,
        expect: Verdict,
    },
    /// A listed tool: `current` is what the plugins before made of it, `expect` how `caller`
    /// is to see it (a 0.1 plugin can change the hints only).
    List {
        tool: Box<ListedTool>,
        caller: Box<Caller>,
        current: Listing,
        expect: Listing,
    },
    /// A call's params or result, for the plugin's content hook.
    Hook(Box<HookCase>),
}

/// The fields of a line's `tool`.
const TOOL_FIELDS: &[&str] = &["server", "name", "kind", "title", "description", "annotations", "client", "era"];
/// The fields of a `tool` line's `expect`.
const LISTING_FIELDS: &[&str] = &["hidden", "name", "title", "description", "hints"];

impl Case {
    /// Reads one line of a calls file.
    pub fn parse(line: &str) -> anyhow::Result<Case> {
        let v: Value = serde_json::from_str(line).context("not valid JSON")?;
        let obj = v.as_object().context("each line must be a JSON object")?;
        known_fields(obj, &["call", "tool", "client", "current", "params", "result", "expect"], "the line")?;
        let expect = obj.get("expect").context("no `expect` (the answer recorded for it)")?;
        match (obj.get("call"), obj.get("tool")) {
            (Some(call), None) => {
                let mut call = call_from_json(call, "`call`")?;
                match obj.get("client") {
                    Some(Value::String(c)) => call.session = c.as_str().into(),
                    Some(_) => bail!("`client` must be a string (the session the call came from)"),
                    None => {}
                }
                let call = match HookCase::of_line(obj, call)? {
                    Ok(hook) => return Ok(Case::Hook(Box::new(hook))),
                    Err(call) => call,
                };
                let current = obj.get("current").map(decision_from_json).transpose()?.unwrap_or_default();
                Ok(Case::Decide { call: Box::new(call), current, expect: verdict_from_json(expect)? })
            }
            (None, Some(tool)) => {
                if obj.contains_key("client") {
                    bail!(
                        "a `tool` line names the client it is listed to in `tool.client` (the line's own \
                         `client` is the session of a call)"
                    );
                }
                let t = tool.as_object().context("`tool` must be an object {server, name, annotations, client}")?;
                known_fields(t, TOOL_FIELDS, "`tool`")?;
                let text = |k: &str| optional_string(t, k, &format!("`tool.{k}`"));
                let kind = match text("kind")? {
                    None => Kind::Tool,
                    Some(name) => KINDS.into_iter().find(|k| kind_name(*k) == name).with_context(|| {
                        format!("`tool.kind` is `{name}`; it is one of tool, prompt, resource-template")
                    })?,
                };
                let listed = ListedTool {
                    kind,
                    server: text("server")?.unwrap_or_else(|| "example-server".to_string()),
                    name: text("name")?.context("`tool` needs a `name`")?,
                    title: text("title")?,
                    description: text("description")?,
                    declared: t.get("annotations").map(hints_from_json).transpose()?.unwrap_or_default(),
                };
                let caller = caller_from_json(tool, "`tool`")?;
                let hints = obj.get("current").map(hints_from_json).transpose()?;
                let current =
                    Listing { hints: hints.unwrap_or_else(|| listed.declared.clone()), ..Listing::of(&listed) };
                let expect = listing_from_json(expect, &current)?;
                Ok(Case::List { tool: Box::new(listed), caller: Box::new(caller), current, expect })
            }
            _ => bail!("a line holds either a `call` (for decide) or a `tool` (for list-tool)"),
        }
    }

    /// A short name for the line in the report, in the words of the plugin's contract.
    fn label(&self, contract: Contract) -> String {
        match self {
            Case::Decide { call, .. } => match &call.tool {
                Some(t) => format!("decide {} {t}", call.method),
                None => format!("decide {}", call.method),
            },
            Case::Hook(h) => h.label(),
            Case::List { tool, .. } if contract == Contract::V1 => format!("annotate {}", tool.name),
            Case::List { tool, caller, .. } => {
                let kind = match tool.kind {
                    Kind::Tool => "",
                    Kind::Prompt => "prompt ",
                    Kind::ResourceTemplate => "resource template ",
                };
                let to = caller.name.as_deref().map(|n| format!(" for {n}")).unwrap_or_default();
                format!("list-tool {kind}{}{to}", tool.name)
            }
        }
    }
}

fn known_fields(obj: &Map<String, Value>, fields: &[&str], what: &str) -> anyhow::Result<()> {
    match obj.keys().find(|k| !fields.contains(&k.as_str())) {
        Some(k) => bail!("{what} has an unknown field `{k}`; its fields are {}", fields.join(", ")),
        None => Ok(()),
    }
}

/// Options of `plugin test`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Options<'a> {
    /// JSON handed to `init` (default `{}`, or the config of the `--config-file` entry).
    pub config_json: Option<&'a str>,
    /// A switchyard.toml whose `[[plugins]]` entry for this file gives the config and limits
    /// (default: the limits of a plugin without an entry).
    pub config_file: Option<&'a Path>,
}

/// What a replay found: the report to print, and whether every line matched.
pub struct Report {
    pub text: String,
    pub result: anyhow::Result<()>,
}

/// Loads `plugin` in the host and replays every line of `calls` against it.
pub fn replay(plugin: &Path, calls: &Path, opts: &Options<'_>) -> Report {
    let mut text = String::new();
    let result = run(plugin, calls, opts, &mut text);
    Report { text, result }
}

fn run(plugin_path: &Path, calls: &Path, opts: &Options<'_>, out: &mut String) -> anyhow::Result<()> {
    let source = std::fs::read_to_string(calls).with_context(|| format!("cannot read {}", calls.display()))?;
    let mut cases = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with("//") {
            continue;
        }
        let case = Case::parse(line).with_context(|| format!("{}:{}", calls.display(), n + 1))?;
        cases.push((n + 1, case));
    }
    if cases.is_empty() {
        bail!("{} holds no recorded calls", calls.display());
    }
    let name = plugin_path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (entry, config_json) = entry_and_config(&name, opts.config_json, opts.config_file)?;
    let bytes = std::fs::read(plugin_path).with_context(|| {
        format!("cannot read {}; build it first with `switchyard plugin build`", plugin_path.display())
    })?;
    let plugin =
        wasm::Plugin::load(&name, &bytes, &wasm::content_hash(&bytes), Limits::from_entry(&entry), &config_json, true)
            .map_err(|e| e.context(format!("{} is not a usable policy plugin", plugin_path.display())))?;
    drop(plugin.output().take_captured());

    let mut failed = 0;
    for (n, case) in &cases {
        let (expected, got) = match case {
            Case::Decide { call, current, expect } => {
                (verdict_to_json(expect), plugin.decide(&CallArgs::new(call), current).map(|v| verdict_to_json(&v)))
            }
            Case::List { tool, caller, current, expect } => (
                listing_to_json(expect, current),
                plugin
                    .list_tool(tool, caller, current, tokio::time::Instant::now())
                    .map(|l| listing_to_json(&l, current)),
            ),
            Case::Hook(h) => (
                hooked::verdict_to_json(&h.expect, h.phase),
                h.replay(&plugin).map(|v| hooked::verdict_to_json(&v, h.phase)),
            ),
        };
        let printed = plugin.output().take_captured();
        match got {
            Ok(got) if got == expected => {
                let _ = writeln!(out, "ok    line {n}: {}", case.label(plugin.contract()));
            }
            Ok(got) => {
                failed += 1;
                let (e, g) = (pretty(&expected), pretty(&got));
                let diff = similar::TextDiff::from_lines(&e, &g)
                    .unified_diff()
                    .context_radius(8)
                    .header("recorded", "now")
                    .to_string();
                let label = case.label(plugin.contract());
                let _ = writeln!(out, "FAIL  line {n}: {label}: the answer differs from the recorded one\n{diff}");
            }
            Err(e) => {
                failed += 1;
                let _ = writeln!(out, "FAIL  line {n}: {}: the plugin {e}", case.label(plugin.contract()));
            }
        }
        for line in printed {
            let _ = writeln!(out, "      plugin {line}");
        }
    }
    let _ = writeln!(out, "{} of {} recorded calls match ({})", cases.len() - failed, cases.len(), calls.display());
    if failed > 0 {
        bail!("{failed} of {} recorded calls in {} got a different answer", cases.len(), calls.display());
    }
    Ok(())
}

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

pub fn verdict_to_json(v: &Verdict) -> Value {
    match v {
        Verdict::Continue(d) => json!({"verdict": "continue", "decision": decision_to_json(d)}),
        Verdict::Stop(d) => json!({"verdict": "stop", "decision": decision_to_json(d)}),
        Verdict::Reject(reason) => json!({"verdict": "reject", "reason": reason}),
    }
}

fn verdict_from_json(v: &Value) -> anyhow::Result<Verdict> {
    let obj = v.as_object().context("`expect` must be an object like {\"verdict\": \"continue\", \"decision\": {}}")?;
    let decision = || obj.get("decision").map(decision_from_json).transpose().map(Option::unwrap_or_default);
    match obj.get("verdict").and_then(Value::as_str) {
        Some("continue") => {
            known_fields(obj, &["verdict", "decision"], "`expect`")?;
            Ok(Verdict::Continue(decision()?))
        }
        Some("stop") => {
            known_fields(obj, &["verdict", "decision"], "`expect`")?;
            Ok(Verdict::Stop(decision()?))
        }
        Some("reject") => {
            known_fields(obj, &["verdict", "reason"], "`expect`")?;
            let reason = obj.get("reason").and_then(Value::as_str).context("a rejection needs its `reason`")?;
            Ok(Verdict::Reject(reason.to_string()))
        }
        _ => bail!("`expect.verdict` must be \"continue\", \"stop\" or \"reject\""),
    }
}

pub fn decision_to_json(d: &Decision) -> Value {
    let mut m = Map::new();
    if let Some(c) = &d.concurrency {
        m.insert(
            "concurrency".into(),
            match c {
                Concurrency::Shared => json!("shared"),
                Concurrency::Exclusive => json!("exclusive"),
                Concurrency::Keyed(keys) => json!({"keyed": keys}),
            },
        );
    }
    if let Some(p) = &d.pool {
        m.insert("pool".into(), json!(p));
    }
    if let Some(t) = d.timeout_ms {
        m.insert("timeout_ms".into(), json!(t));
    }
    if let Some(r) = d.retry {
        m.insert("retry".into(), json!({"attempts": r.attempts, "backoff_ms": r.backoff_ms}));
    }
    if let Some(p) = &d.placement {
        m.insert(
            "placement".into(),
            match p {
                Placement::Key(k) => json!({"key": k}),
                other => json!(other.describe()),
            },
        );
    }
    Value::Object(m)
}

fn decision_from_json(v: &Value) -> anyhow::Result<Decision> {
    let obj =
        v.as_object().context("a decision must be an object {concurrency, pool, timeout_ms, retry, placement}")?;
    known_fields(obj, &["concurrency", "pool", "timeout_ms", "retry", "placement"], "a decision")?;
    let concurrency = match obj.get("concurrency") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "shared" => Some(Concurrency::Shared),
        Some(Value::String(s)) if s == "exclusive" => Some(Concurrency::Exclusive),
        Some(Value::Object(k)) if k.len() == 1 && k.get("keyed").is_some_and(Value::is_array) => {
            let keys = k["keyed"].as_array().into_iter().flatten();
            let keys: Option<BTreeSet<String>> = keys.map(|k| k.as_str().map(str::to_string)).collect();
            Some(Concurrency::Keyed(keys.context("`concurrency.keyed` must be a list of strings")?))
        }
        Some(_) => bail!("`concurrency` must be \"shared\", \"exclusive\" or {{\"keyed\": [\"key\", ...]}}"),
    };
    let pool = match obj.get("pool") {
        None | Some(Value::Null) => None,
        Some(p) => Some(p.as_str().context("`pool` must be a string")?.to_string()),
    };
    let timeout_ms = match obj.get("timeout_ms") {
        None | Some(Value::Null) => None,
        Some(t) => Some(t.as_u64().context("`timeout_ms` must be a non-negative integer")?),
    };
    let retry = match obj.get("retry") {
        None | Some(Value::Null) => None,
        Some(r) => {
            let n = |k: &str| r.get(k).and_then(Value::as_u64).and_then(|n| u32::try_from(n).ok());
            let attempts = n("attempts").context("`retry` needs {\"attempts\": n, \"backoff_ms\": n}")?;
            let backoff_ms = n("backoff_ms").context("`retry` needs {\"attempts\": n, \"backoff_ms\": n}")?;
            Some(Retry { attempts, backoff_ms })
        }
    };
    let placement = match obj.get("placement") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s == "shared" => Some(Placement::Shared),
        Some(Value::String(s)) if s == "client" => Some(Placement::Client),
        Some(Value::String(s)) if s == "session" => Some(Placement::Session),
        Some(Value::Object(k)) if k.len() == 1 && k.get("key").is_some_and(Value::is_string) => {
            Some(Placement::Key(k["key"].as_str().unwrap_or_default().to_string()))
        }
        Some(_) => bail!("`placement` must be \"shared\", \"client\", \"session\" or {{\"key\": \"name\"}}"),
    };
    Ok(Decision { concurrency, pool, timeout_ms, retry, placement })
}

/// Every kind of listed item, for reading a `tool.kind`.
const KINDS: [Kind; 3] = [Kind::Tool, Kind::Prompt, Kind::ResourceTemplate];

/// How a line names a kind of listed item (`tool.kind`), written and read.
pub(crate) fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Tool => "tool",
        Kind::Prompt => "prompt",
        Kind::ResourceTemplate => "resource-template",
    }
}

/// How a tool is shown, in the words of a `tool` line's `expect`: `hints` always, and each
/// other field only where it differs from `base` (what the server listed).
pub(crate) fn listing_to_json(l: &Listing, base: &Listing) -> Value {
    let mut m = Map::new();
    if l.hidden {
        m.insert("hidden".into(), json!(true));
    }
    if l.name != base.name {
        m.insert("name".into(), json!(l.name));
    }
    if l.title != base.title {
        m.insert("title".into(), json!(l.title));
    }
    if l.description != base.description {
        m.insert("description".into(), json!(l.description));
    }
    m.insert("hints".into(), hints_to_json(&l.hints));
    Value::Object(m)
}

/// A `tool` line's `expect`; a field left out is `base`'s (`null` for a title or description
/// says it has none).
fn listing_from_json(v: &Value, base: &Listing) -> anyhow::Result<Listing> {
    let obj = v.as_object().context("`expect` of a tool must be an object like {\"hints\": {...}}")?;
    known_fields(obj, LISTING_FIELDS, "`expect`")?;
    let text = |k: &str, base: &Option<String>| -> anyhow::Result<Option<String>> {
        match obj.get(k) {
            None => Ok(base.clone()),
            Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => bail!("`expect.{k}` must be a string (or null: none)"),
        }
    };
    Ok(Listing {
        hidden: match obj.get("hidden") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => bail!("`expect.hidden` must be true or false"),
        },
        name: match obj.get("name") {
            None => base.name.clone(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => bail!("`expect.name` must be a string"),
        },
        title: text("title", &base.title)?,
        description: text("description", &base.description)?,
        hints: obj.get("hints").map(hints_from_json).transpose()?.unwrap_or_else(|| base.hints.clone()),
    })
}

/// The MCP names of the boolean hints, beside their field in [`Hints`].
const HINT_NAMES: [&str; 4] = ["readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"];

fn flags(h: &Hints) -> [Option<bool>; 4] {
    [h.read_only, h.destructive, h.idempotent, h.open_world]
}

pub fn hints_to_json(h: &Hints) -> Value {
    let mut m = Map::new();
    for (name, flag) in HINT_NAMES.iter().zip(flags(h)) {
        if let Some(b) = flag {
            m.insert(name.to_string(), json!(b));
        }
    }
    if let Some(t) = &h.title {
        m.insert("title".into(), json!(t));
    }
    Value::Object(m)
}

fn hints_from_json(v: &Value) -> anyhow::Result<Hints> {
    let obj = v.as_object().context("hints must be an object like {\"readOnlyHint\": true}")?;
    let mut fields = HINT_NAMES.to_vec();
    fields.push("title");
    known_fields(obj, &fields, "hints")?;
    let mut flags = [None; 4];
    for (flag, name) in flags.iter_mut().zip(HINT_NAMES) {
        *flag = match obj.get(name) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => bail!("`{name}` must be true or false"),
        };
    }
    let [read_only, destructive, idempotent, open_world] = flags;
    Ok(Hints {
        read_only,
        destructive,
        idempotent,
        open_world,
        title: match obj.get("title") {
            None | Some(Value::Null) => None,
            Some(t) => Some(t.as_str().context("`title` must be a string")?.to_string()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_core::decision::Transport;

    #[test]
    fn a_recorded_decision_reads_back_as_it_is_written() {
        let line = r#"{"call": {"server": "fs", "tool": "write", "arguments": {"path": "/a"}}, "client": "s-1",
            "expect": {"verdict": "continue", "decision": {"concurrency": {"keyed": ["/a"]}, "pool": "big",
            "timeout_ms": 3000, "retry": {"attempts": 2, "backoff_ms": 100}, "placement": {"key": "/a"}}}}"#;
        let Case::Decide { call, expect, .. } = Case::parse(&line.replace('\n', " ")).unwrap() else { panic!() };
        assert_eq!(&*call.session, "s-1");
        assert_eq!(call.arguments.as_deref(), Some(r#"{"path":"/a"}"#));
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(verdict_to_json(&expect), v["expect"]);
        for p in ["shared", "client", "session"] {
            let d = decision_from_json(&json!({ "placement": p })).unwrap();
            assert_eq!(decision_to_json(&d), json!({ "placement": p }));
        }
        let err = decision_from_json(&json!({"placement": "per-client"})).unwrap_err().to_string();
        assert!(err.contains("\"client\""), "{err}");
    }

    #[test]
    fn a_typo_in_a_recorded_line_is_named() {
        for (line, says) in [
            (r#"{"call": {}, "expect": {"verdict": "continue", "decison": {}}}"#, "decison"),
            (r#"{"call": {}, "expect": {"verdict": "allow"}}"#, "must be \"continue\""),
            (r#"{"tool": {"name": "x"}, "expect": {"hints": {"readOnly": true}}}"#, "readOnly"),
            (r#"{"call": {}}"#, "no `expect`"),
            (r#"{"tool": {"name": "x", "kind": "resource"}, "expect": {}}"#, "resource-template"),
            (r#"{"tool": {"name": "x"}, "client": "cursor", "expect": {}}"#, "`tool.client`"),
            (r#"{"tool": {"name": "x"}, "expect": {"hidden": "yes"}}"#, "`expect.hidden`"),
            (r#"{"tool": {"name": "x"}, "expect": {"renamed": "y"}}"#, "renamed"),
        ] {
            let e = format!("{:#}", Case::parse(line).unwrap_err());
            assert!(e.contains(says), "{line}: {e}");
        }
    }

    #[test]
    fn a_listed_tool_is_expected_unchanged_but_for_what_its_line_says() {
        let line = r#"{"tool": {"server": "fs", "name": "read_file", "kind": "prompt", "title": "Read",
            "annotations": {"readOnlyHint": true}, "client": {"name": "cursor", "transport": "socket"},
            "era": "2025-11-25"}, "expect": {"name": "cat", "title": null}}"#;
        let Case::List { tool, caller, current, expect } = Case::parse(&line.replace('\n', " ")).unwrap() else {
            panic!()
        };
        assert_eq!((tool.kind, tool.title.as_deref()), (Kind::Prompt, Some("Read")));
        assert_eq!((caller.name.as_deref(), caller.transport), (Some("cursor"), Transport::Socket));
        assert_eq!(&*caller.era, "2025-11-25");
        assert_eq!(current, Listing::of(&tool), "without `current`, what the server listed");
        assert_eq!(
            expect,
            Listing { name: "cat".into(), title: None, ..Listing::of(&tool) },
            "hints, description and visibility unchanged"
        );
        assert_eq!(
            listing_to_json(&expect, &current),
            json!({"name": "cat", "title": null, "hints": {"readOnlyHint": true}})
        );
        // The lines of 0.1's calls files read as they did: the hints expected, for no client.
        let old = r#"{"tool": {"server": "fs", "name": "search", "annotations": {}}, "expect": {"hints": {"readOnlyHint": true}}}"#;
        let Case::List { caller, expect, .. } = Case::parse(old).unwrap() else { panic!() };
        assert_eq!(*caller, Caller::default());
        assert_eq!((expect.hidden, expect.name.as_str(), expect.hints.read_only), (false, "search", Some(true)));
    }
}
