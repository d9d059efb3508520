//! A 0.3 plugin's own exports: its `interest`, its content hooks (`on-request`, `on-result`) and
//! its `list-tool`, which has the 0.2 shape in the 0.3 types.

use switchyard_core::decision;

use super::convert::{from_wit3_hints, to_wit3_client, to_wit3_hints};
use super::runtime::wit3;
use super::{
    Exports, MIN_INIT_DEADLINE_MS, Plugin, PluginError, Pre, Warm, classify, runtime::Limits, runtime::runtime,
};
use crate::{ListedTool, Listing};

/// Which calls a plugin's content hooks are for (its `interest`), globs as the contract says:
/// `*` any run of characters, `?` one character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interest {
    pub methods: Vec<String>,
    /// For `tools/call`: the tools (empty: every tool).
    pub tools: Vec<String>,
    pub request: bool,
    pub result: bool,
}

impl Interest {
    /// Whether every glob is one [`glob`] reads as meant: not empty (it would match nothing, so
    /// `tools = [""]` would silently turn the hooks off), and without the brackets and braces of
    /// other glob syntaxes, which here would match only themselves.
    pub fn check(&self) -> Result<(), String> {
        for (list, globs) in [("methods", &self.methods), ("tools", &self.tools)] {
            for g in globs.iter() {
                if g.trim().is_empty() {
                    return Err(format!(
                        "`{list}` holds an empty glob, which matches no {}; remove it, or write `*` for every one",
                        if list == "tools" { "tool" } else { "method" }
                    ));
                }
                if let Some(c) = g.chars().find(|c| matches!(c, '[' | ']' | '{' | '}') || c.is_whitespace()) {
                    return Err(format!(
                        "`{list}` glob `{g}` holds `{c}`, which globs here do not know (only `*`, any run of \
                         characters, and `?`, one character); write the names, or several globs"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Which hooks, for what: `on-result for methods [tools/call], every tool` (for `plugin
    /// check` and `status`).
    pub fn describe(&self) -> String {
        let tools =
            if self.tools.is_empty() { "every tool".to_string() } else { format!("tools [{}]", self.tools.join(", ")) };
        let hooks: Vec<&str> = [(self.request, "on-request"), (self.result, "on-result")]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect();
        format!("{} for methods [{}], {tools}", hooks.join(" and "), self.methods.join(", "))
    }

    /// Whether a call of `method` (to `tool`, for a `tools/call`) is one the hooks are for.
    pub fn covers(&self, method: &str, tool: Option<&str>) -> bool {
        if !self.methods.iter().any(|g| glob(g, method)) {
            return false;
        }
        match tool {
            Some(tool) if method == "tools/call" => self.tools.is_empty() || self.tools.iter().any(|g| glob(g, tool)),
            _ => true,
        }
    }
}

/// Whether `text` matches `pattern` whole (`*`: any run, `?`: one character). No allocation:
/// it runs for every call a chain with hooks sees.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return pattern == text;
    }
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    // The last `*` seen, and where in the text its run ends for now.
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if p.get(pi) == Some(&b'*') {
            star = Some((pi, ti));
            pi += 1;
            continue;
        }
        if pi < p.len() {
            let (want, have) = (char_len(pattern, pi), char_len(text, ti));
            if p[pi] == b'?' || p[pi..pi + want] == t[ti..ti + have] {
                pi += want;
                ti += have;
                continue;
            }
        }
        // A mismatch: the last `*` takes one character more, or there is none to take it.
        let Some((sp, st)) = star else { return false };
        let next = st + char_len(text, st);
        (pi, ti, star) = (sp + 1, next, Some((sp, next)));
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The length in bytes of the character of `s` that starts at `at`.
fn char_len(s: &str, at: usize) -> usize {
    s[at..].chars().next().map_or(1, char::len_utf8)
}

/// What a content hook answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookVerdict {
    Continue,
    /// The new params or result, as JSON text.
    Modify(String),
    /// The plugin's reason.
    Deny(String),
}

/// One call as the hooks see it, made once per call and shared by the plugins asked.
pub struct HookArgs {
    call: wit3::HookCall,
    now: tokio::time::Instant,
}

impl HookArgs {
    pub fn new(c: &decision::CallInfo) -> HookArgs {
        HookArgs {
            call: wit3::HookCall {
                server: c.server.to_string(),
                session: c.session.to_string(),
                client: to_wit3_client(&c.caller),
                era: c.caller.era.to_string(),
                method: c.method.to_string(),
                tool: c.tool.as_deref().map(str::to_string),
            },
            now: tokio::time::Instant::now(),
        }
    }

    pub fn method(&self) -> &str {
        &self.call.method
    }

    pub fn tool(&self) -> Option<&str> {
        self.call.tool.as_deref()
    }
}

impl Plugin {
    /// What its hooks are for: a 0.3 plugin's `interest`, asked of the instance `init` just
    /// made (None for a plugin of an earlier contract, or one that declares no method).
    pub(super) fn ask_interest(&self, warm: &mut Warm) -> Result<Option<Interest>, PluginError> {
        let Exports::V3(b) = &warm.bindings else { return Ok(None) };
        let _running = runtime().running();
        let budget = self.limits.deadline_ms.max(MIN_INIT_DEADLINE_MS);
        warm.store.set_epoch_deadline(Limits::ticks(budget));
        let asked = b.call_interest(&mut warm.store);
        let printed = warm.store.data().end_call();
        let i = asked.map_err(|e| {
            let e = super::with_printed(classify(&warm.store, e, budget), &printed);
            PluginError::Init(format!("interest {e}"))
        })?;
        let interest = Interest { methods: i.methods, tools: i.tools, request: i.request, result: i.result };
        interest.check().map_err(|e| PluginError::Init(format!("interest: {e}")))?;
        Ok((!interest.methods.is_empty() && (interest.request || interest.result)).then_some(interest))
    }

    /// What its content hooks are for (None: it has none).
    pub fn interest(&self) -> Option<&Interest> {
        self.interest.as_ref()
    }

    /// Its `on-request` on a request's params (JSON text).
    pub fn on_request(&self, call: &HookArgs, params: &str) -> Result<HookVerdict, PluginError> {
        let budget = self.limits.hook_budget_ms(params.len());
        let v = self.with_budget(call.now, budget, |b, s| match b {
            Exports::V3(b) => b.call_on_request(s, &call.call, params),
            _ => unreachable!("only a 0.3 plugin declares an interest"),
        })?;
        Ok(verdict(v))
    }

    /// Its `on-result` on a server's result (JSON text).
    pub fn on_result(&self, call: &HookArgs, result: &str) -> Result<HookVerdict, PluginError> {
        let budget = self.limits.hook_budget_ms(result.len());
        let v = self.with_budget(call.now, budget, |b, s| match b {
            Exports::V3(b) => b.call_on_result(s, &call.call, result),
            _ => unreachable!("only a 0.3 plugin declares an interest"),
        })?;
        Ok(verdict(v))
    }

    /// `list-tool` of a 0.3 plugin.
    pub(super) fn list_tool_v3(
        &self,
        tool: &ListedTool,
        caller: &decision::Caller,
        current: &Listing,
        now: tokio::time::Instant,
    ) -> Result<Listing, PluginError> {
        debug_assert!(matches!(self.pre, Pre::V3(_)));
        let wit_tool = wit3::Tool {
            kind: match tool.kind {
                crate::Kind::Tool => wit3::ItemKind::Tool,
                crate::Kind::Prompt => wit3::ItemKind::Prompt,
                crate::Kind::ResourceTemplate => wit3::ItemKind::ResourceTemplate,
            },
            server: tool.server.clone(),
            name: tool.name.clone(),
            title: tool.title.clone(),
            description: tool.description.clone(),
            declared: to_wit3_hints(&tool.declared),
            client: to_wit3_client(caller),
            era: caller.era.to_string(),
        };
        let wit_current = wit3::Listing {
            hidden: current.hidden,
            name: current.name.clone(),
            title: current.title.clone(),
            description: current.description.clone(),
            hints: to_wit3_hints(&current.hints),
        };
        let l = self.with_instance(now, |b, s| match b {
            Exports::V3(b) => b.call_list_tool(s, &wit_tool, &wit_current),
            _ => unreachable!("a plugin's instances are of its own contract"),
        })?;
        Ok(Listing {
            hidden: l.hidden,
            name: l.name,
            title: l.title,
            description: l.description,
            hints: from_wit3_hints(l.hints),
        })
    }
}

fn verdict(v: wit3::HookVerdict) -> HookVerdict {
    match v {
        wit3::HookVerdict::Continue => HookVerdict::Continue,
        wit3::HookVerdict::Modify(json) => HookVerdict::Modify(json),
        wit3::HookVerdict::Deny(reason) => HookVerdict::Deny(reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_the_whole_text() {
        for (p, t, want) in [
            ("tools/call", "tools/call", true),
            ("tools/call", "tools/callx", false),
            ("resources/*", "resources/read", true),
            ("resources/*", "tools/call", false),
            ("*", "", true),
            ("read_*", "read_file", true),
            ("*file*", "read_file_x", true),
            ("*file", "file_read", false),
            ("r?ad", "read", true),
            ("r?ad", "rad", false),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "axxbyy", false),
            ("", "", true),
            ("", "x", false),
            ("*", "anything at all", true),
            ("?ö?", "aöb", true),
            ("?", "ö", true),
            ("??", "ö", false),
            ("*é", "café", true),
            ("a*a", "a", false),
            ("**x", "yx", true),
        ] {
            assert_eq!(glob(p, t), want, "{p} ~ {t}");
        }
    }

    #[test]
    fn an_empty_glob_or_one_of_another_syntax_is_refused() {
        let of = |methods: &[&str], tools: &[&str]| Interest {
            methods: methods.iter().map(|s| s.to_string()).collect(),
            tools: tools.iter().map(|s| s.to_string()).collect(),
            request: true,
            result: true,
        };
        assert_eq!(of(&["tools/call", "resources/*"], &["read_?", "*file*"]).check(), Ok(()));
        let e = of(&["tools/call"], &[""]).check().unwrap_err();
        assert!(e.starts_with("`tools` holds an empty glob, which matches no tool;"), "{e}");
        let e = of(&["tools/call"], &["[a-z"]).check().unwrap_err();
        assert!(e.starts_with("`tools` glob `[a-z` holds `[`, which globs here do not know"), "{e}");
        assert!(of(&["tools/{call,list}"], &[]).check().unwrap_err().contains("`methods` glob"));
        assert!(of(&["tools/call "], &[]).check().is_err());
    }

    #[test]
    fn a_tool_glob_narrows_tools_call_only() {
        let i = Interest {
            methods: vec!["tools/call".into(), "resources/*".into()],
            tools: vec!["read_*".into()],
            request: true,
            result: true,
        };
        assert!(i.covers("tools/call", Some("read_file")));
        assert!(!i.covers("tools/call", Some("write_file")));
        assert!(i.covers("resources/read", None));
        assert!(!i.covers("prompts/get", None));
        let every = Interest { tools: vec![], ..i };
        assert!(every.covers("tools/call", Some("write_file")));
    }
}
