//! The content-hook lines of a calls file (`plugin test` of a 0.3 plugin): a call with the
//! `params` its request carried, or with the `result` its server answered, and what the
//! plugin's `on-request` or `on-result` is expected to make of it.
//!
//! `{"call": {...}, "params": {"name": "read_file", "arguments": {...}}, "expect": {"verdict":
//! "continue"}}` and `{"call": {...}, "result": {"content": [...]}, "expect": {"verdict":
//! "modify", "result": {...}}}`; `expect` is `{"verdict": "continue"}`, `{"verdict": "modify",
//! "params" | "result": <the JSON it is changed to>}` or `{"verdict": "deny", "reason": "..."}`.
//! A changed payload is compared as JSON (key order and spacing do not matter). A call outside
//! the plugin's declared interest is passed by the host without asking it, so it is expected
//! to `continue`.

use anyhow::{Context, bail};
use serde_json::{Map, Value, json};

use crate::Phase;
use crate::wasm::{self, HookArgs, HookVerdict};
use switchyard_core::decision::CallInfo;

/// A hook line, read.
#[derive(Debug, Clone)]
pub struct HookCase {
    pub call: Box<CallInfo>,
    pub phase: Phase,
    /// The params or the result, as JSON text.
    pub payload: String,
    pub expect: HookVerdict,
}

/// The key a line holds its payload under, and `expect` its changed payload.
pub(crate) fn key(phase: Phase) -> &'static str {
    match phase {
        Phase::Request => "params",
        Phase::Result => "result",
    }
}

impl HookCase {
    /// The hook case of a line whose `call` is already read, when the line has `params` or
    /// `result` (None: it is a line for `decide`).
    pub(crate) fn of_line(obj: &Map<String, Value>, mut call: CallInfo) -> anyhow::Result<Result<HookCase, CallInfo>> {
        let phase = match (obj.get("params"), obj.get("result")) {
            (None, None) => return Ok(Err(call)),
            (Some(_), None) => Phase::Request,
            (None, Some(_)) => Phase::Result,
            (Some(_), Some(_)) => bail!("a line holds `params` (for on-request) or `result` (for on-result), not both"),
        };
        let payload = &obj[key(phase)];
        if !payload.is_object() {
            bail!("`{}` must be a JSON object (the request's params, or the server's result)", key(phase));
        }
        if obj.contains_key("current") {
            bail!("`current` is a decision, for `decide` lines; a `{}` line has none", key(phase));
        }
        // The tool a tools/call's params name, when the call does not say it.
        let call_names_tool = obj.get("call").and_then(|c| c.get("tool")).is_some();
        if let (false, Some(name)) = (call_names_tool, payload.get("name").and_then(Value::as_str)) {
            call.tool = Some(name.into());
        }
        let expect = expect_from_json(obj.get("expect").context("no `expect`")?, phase)?;
        Ok(Ok(HookCase { call: Box::new(call), phase, payload: payload.to_string(), expect }))
    }

    pub(crate) fn label(&self) -> String {
        let hook = match self.phase {
            Phase::Request => "on-request",
            Phase::Result => "on-result",
        };
        match &self.call.tool {
            Some(t) => format!("{hook} {} {t}", self.call.method),
            None => format!("{hook} {}", self.call.method),
        }
    }

    /// What the host makes of it with `plugin`: the plugin's answer, or `continue` when the
    /// call is outside its interest (the host does not ask it then).
    pub(crate) fn replay(&self, plugin: &wasm::Plugin) -> Result<HookVerdict, wasm::PluginError> {
        let wanted = plugin.interest().is_some_and(|i| {
            let hook = match self.phase {
                Phase::Request => i.request,
                Phase::Result => i.result,
            };
            hook && i.covers(&self.call.method, self.call.tool.as_deref())
        });
        if !wanted {
            return Ok(HookVerdict::Continue);
        }
        let args = HookArgs::new(&self.call);
        match self.phase {
            Phase::Request => plugin.on_request(&args, &self.payload),
            Phase::Result => plugin.on_result(&args, &self.payload),
        }
    }
}

/// A hook's answer in the words of a line's `expect`; a changed payload as JSON (as text when
/// it does not parse, so the diff shows what the plugin wrote).
pub fn verdict_to_json(v: &HookVerdict, phase: Phase) -> Value {
    match v {
        HookVerdict::Continue => json!({"verdict": "continue"}),
        HookVerdict::Modify(text) => {
            let changed = serde_json::from_str::<Value>(text).unwrap_or_else(|_| json!(text));
            json!({"verdict": "modify", key(phase): changed})
        }
        HookVerdict::Deny(reason) => json!({"verdict": "deny", "reason": reason}),
    }
}

fn expect_from_json(v: &Value, phase: Phase) -> anyhow::Result<HookVerdict> {
    let obj = v.as_object().context("`expect` must be an object like {\"verdict\": \"continue\"}")?;
    let only = |fields: &[&str]| -> anyhow::Result<()> {
        match obj.keys().find(|k| !fields.contains(&k.as_str())) {
            Some(k) => bail!("`expect` has an unknown field `{k}`; its fields here are {}", fields.join(", ")),
            None => Ok(()),
        }
    };
    match obj.get("verdict").and_then(Value::as_str) {
        Some("continue") => {
            only(&["verdict"])?;
            Ok(HookVerdict::Continue)
        }
        Some("modify") => {
            only(&["verdict", key(phase)])?;
            let changed = obj
                .get(key(phase))
                .filter(|c| c.is_object())
                .with_context(|| format!("a `modify` expects the changed `{}` (a JSON object)", key(phase)))?;
            Ok(HookVerdict::Modify(changed.to_string()))
        }
        Some("deny") => {
            only(&["verdict", "reason"])?;
            let reason = obj.get("reason").and_then(Value::as_str).context("a `deny` needs its `reason`")?;
            Ok(HookVerdict::Deny(reason.to_string()))
        }
        _ => bail!("`expect.verdict` of a `{}` line must be \"continue\", \"modify\" or \"deny\"", key(phase)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::call_from_json;

    fn parse(line: &str) -> anyhow::Result<HookCase> {
        let v: Value = serde_json::from_str(line).unwrap();
        let obj = v.as_object().unwrap();
        let call = call_from_json(&obj["call"], "`call`")?;
        HookCase::of_line(obj, call)?.map_err(|_| anyhow::anyhow!("not a hook line"))
    }

    #[test]
    fn a_hook_line_reads_back_as_it_is_written() {
        let line = r#"{"call": {"server": "fs"}, "params": {"name": "read_file", "arguments": {"path": "/a"}},
            "expect": {"verdict": "modify", "params": {"name": "read_file", "arguments": {"path": "/b"}}}}"#;
        let case = parse(line).unwrap();
        assert_eq!(
            (case.phase, case.call.tool.as_deref()),
            (Phase::Request, Some("read_file")),
            "the tool from params"
        );
        assert_eq!(case.label(), "on-request tools/call read_file");
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(verdict_to_json(&case.expect, case.phase), v["expect"]);
        let deny =
            parse(r#"{"call": {"tool": "t"}, "result": {}, "expect": {"verdict": "deny", "reason": "no"}}"#).unwrap();
        assert_eq!((deny.phase, deny.expect), (Phase::Result, HookVerdict::Deny("no".into())));
        let bad = HookVerdict::Modify("not json".into());
        assert_eq!(verdict_to_json(&bad, Phase::Result), json!({"verdict": "modify", "result": "not json"}));
    }

    #[test]
    fn a_wrong_hook_line_is_named() {
        for (line, says) in [
            (r#"{"call": {}, "params": {}, "result": {}, "expect": {}}"#, "not both"),
            (r#"{"call": {}, "result": [], "expect": {}}"#, "`result` must be a JSON object"),
            (r#"{"call": {}, "result": {}, "expect": {"verdict": "reject"}}"#, "\"deny\""),
            (r#"{"call": {}, "result": {}, "expect": {"verdict": "modify"}}"#, "changed `result`"),
            (r#"{"call": {}, "result": {}, "expect": {"verdict": "modify", "params": {}}}"#, "unknown field `params`"),
            (r#"{"call": {}, "result": {}, "current": {}, "expect": {"verdict": "continue"}}"#, "`current`"),
        ] {
            let e = format!("{:#}", parse(line).unwrap_err());
            assert!(e.contains(says), "{line}: {e}");
        }
    }
}
