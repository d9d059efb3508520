//! Content hooks (`switchyard:policy@0.3.0`): the chain's plugins read, change or refuse a
//! call's params before it is sent (in chain order) and its result before the client gets it
//! (in reverse order), each under its entry's `mode`, `fail` and `max_payload_kib`.
//!
//! A call no plugin declared an interest in costs one flag test per chain ([`PluginSet::hooked`]):
//! nothing is copied and no plugin is entered.

use std::sync::Arc;

use switchyard_config::{Fail, HookMode};
use switchyard_core::audit::HookNote;
use switchyard_core::decision::{CallInfo, Rejection};

use super::{Loaded, PluginSet, Runs, guarded, wasm, worker};
use wasm::{HookArgs, HookVerdict, PluginError};

/// Which hook: on the request's params, or on the server's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Request,
    Result,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Request => "request",
            Phase::Result => "result",
        }
    }

    fn op(self) -> &'static str {
        match self {
            Phase::Request => "on_request",
            Phase::Result => "on_result",
        }
    }
}

/// What the hooks made of a call's params or result.
#[derive(Debug, Default, PartialEq)]
pub struct Hooked {
    /// The new params or result (JSON text) when an enforcing plugin changed it.
    pub changed: Option<String>,
    /// The refusal, when an enforcing plugin denied it or failed closed: later plugins were
    /// not asked.
    pub denied: Option<Rejection>,
    /// Every hook that did more than pass it on (or would have, in audit mode), for the
    /// call's audit line.
    pub notes: Vec<HookNote>,
}

impl Loaded {
    /// Its plugin, when its hooks want `phase` of this call.
    fn hooks(&self, phase: Phase, server: &str, method: &str, tool: Option<&str>) -> Option<&wasm::Plugin> {
        let Runs::Ready(plugin) = &self.plugin else { return None };
        let interest = plugin.interest()?;
        let wanted = match phase {
            Phase::Request => interest.request,
            Phase::Result => interest.result,
        };
        (wanted && self.applies_to(server) && interest.covers(method, tool)).then_some(plugin)
    }
}

impl PluginSet {
    /// Whether a plugin's hook wants `phase` of a call of `method` (to `tool`) on `server`. No
    /// allocation; a chain without hooks answers from one flag.
    pub fn hooked(&self, phase: Phase, server: &str, method: &str, tool: Option<&str>) -> bool {
        self.hooks && self.chain.iter().any(|p| p.hooks(phase, server, method, tool).is_some())
    }

    /// Runs the hooks of `phase` on `payload` (the params or the result, JSON text) on a plugin
    /// worker thread in the call's session's turn. Ask [`PluginSet::hooked`] first: this copies
    /// the payload.
    pub async fn hook_async(self: &Arc<Self>, phase: Phase, call: &CallInfo, payload: &str) -> Hooked {
        let (set, args, payload) = (self.clone(), HookArgs::new(call), payload.to_string());
        let server = call.server.clone();
        worker::run(&call.session, move || set.hook(phase, &server, &args, payload)).await.unwrap_or_else(|e| Hooked {
            denied: Some(Rejection::new("switchyard", e.to_string())),
            ..Hooked::default()
        })
    }

    /// [`PluginSet::hook_async`] on the calling thread (not an async runtime thread).
    pub(crate) fn hook(&self, phase: Phase, server: &str, args: &HookArgs, mut payload: String) -> Hooked {
        let mut out = Hooked::default();
        let (method, tool) = (args.method(), args.tool());
        let what = match tool {
            Some(t) => format!("tools/call `{t}`"),
            None => method.to_string(),
        };
        let order: Box<dyn Iterator<Item = &Arc<Loaded>>> = match phase {
            Phase::Request => Box::new(self.chain.iter()),
            Phase::Result => Box::new(self.chain.iter().rev()),
        };
        for p in order {
            let Some(plugin) = p.hooks(phase, server, method, tool) else { continue };
            let answer = self.ask(p, plugin, phase, args, &payload);
            let audit = p.entry.mode == HookMode::Audit;
            let (verdict, denial) = match answer {
                Ok(HookVerdict::Continue) => continue,
                Ok(HookVerdict::Modify(new)) => match checked(phase, method, tool, &new) {
                    Ok(()) => {
                        if !audit {
                            payload = new;
                            out.changed = Some(payload.clone());
                        }
                        ("modify", None)
                    }
                    Err(why) => {
                        let why = format!("answered modify with {why}");
                        failed(p, plugin, &what, phase, &Failure { said: why.clone(), logged: why }, audit)
                    }
                },
                Ok(HookVerdict::Deny(reason)) => ("deny", Some(reason)),
                Err(e) => failed(p, plugin, &what, phase, &e, audit),
            };
            let mode = if audit { "audit" } else { "enforce" };
            if let Some(m) = &self.metrics {
                m.plugin_hook(&p.label, phase.name(), verdict, mode);
            }
            out.notes.push(HookNote {
                plugin: p.name.clone(),
                phase: phase.name().to_string(),
                verdict: verdict.to_string(),
                mode: mode.to_string(),
            });
            if audit {
                let would = match &denial {
                    Some(reason) => format!("deny it: {reason}"),
                    None if verdict == "modify" => "modify it".to_string(),
                    None => "let it pass (fail = open)".to_string(),
                };
                let note = format!(
                    "audit: the {} hook of {what} would {would} (mode = \"audit\": nothing changed)",
                    phase.name()
                );
                plugin.output().line(tracing::Level::INFO, "switchyard", &note);
                continue;
            }
            if let Some(reason) = denial {
                out.denied = Some(Rejection::new(&p.name, reason));
                out.changed = None;
                return out;
            }
        }
        out
    }

    /// One plugin's hook on `payload`, or why it could not answer (a payload over its limit is
    /// not handed in).
    fn ask(
        &self,
        p: &Loaded,
        plugin: &wasm::Plugin,
        phase: Phase,
        args: &HookArgs,
        payload: &str,
    ) -> Result<HookVerdict, Failure> {
        let limit = p.entry.max_payload_bytes();
        if payload.len() > limit {
            let why = format!(
                "was not handed the {} of {} KiB: it is over its max_payload_kib ({})",
                if phase == Phase::Request { "params" } else { "result" },
                payload.len().div_ceil(1024),
                p.entry.max_payload_kib
            );
            return Err(Failure { said: why.clone(), logged: why });
        }
        let started = std::time::Instant::now();
        let answer = guarded(|| match phase {
            Phase::Request => plugin.on_request(args, payload),
            Phase::Result => plugin.on_result(args, payload),
        });
        self.measured(&p.label, phase.op(), started, &answer);
        answer.map_err(|e: PluginError| Failure::of(&e))
    }
}

/// Why a hook could not answer: in full for the log, and as the client (and so a model) is
/// told under `fail = "closed"`.
struct Failure {
    logged: String,
    said: String,
}

impl Failure {
    fn of(e: &PluginError) -> Failure {
        let said = match e {
            // A trap's text holds the plugin's panic message and what it printed, which may
            // quote the very content it was filtering: that stays in the log.
            PluginError::Trap(_) => "trapped (the router's log has the details)".to_string(),
            e => e.to_string(),
        };
        Failure { logged: e.to_string(), said }
    }
}

/// A hook that could not answer (`e` says why): logged, and under `fail = "closed"` (when
/// enforced) a refusal.
fn failed(
    p: &Loaded,
    plugin: &wasm::Plugin,
    what: &str,
    phase: Phase,
    e: &Failure,
    audit: bool,
) -> (&'static str, Option<String>) {
    let logged = &e.logged;
    match p.entry.fails() {
        Fail::Open => {
            let note = format!(
                "the {} hook of {what} passed it on unchanged: the plugin {logged} (fail = open)",
                phase.name()
            );
            plugin.output().line(tracing::Level::WARN, "switchyard", &note);
            ("failed", None)
        }
        Fail::Closed => {
            if !audit {
                // A result is withheld after the server ran the call: not "refused".
                let how = match phase {
                    Phase::Request => "refused",
                    Phase::Result => "ran, and its result was withheld",
                };
                let note = format!("{what} {how}: the {} hook {logged} (fail = closed)", phase.name());
                plugin.output().line(tracing::Level::WARN, "switchyard", &note);
            }
            ("failed", Some(format!("plugin failed: it {}", e.said)))
        }
    }
}

/// Whether a modified params or result is one the call can carry: a JSON object and, for the
/// params of a `tools/call`, for the same tool.
pub(crate) fn checked(phase: Phase, method: &str, tool: Option<&str>, new: &str) -> Result<(), String> {
    let value: serde_json::Value = serde_json::from_str(new).map_err(|e| format!("text that is not JSON ({e})"))?;
    let Some(object) = value.as_object() else { return Err("JSON that is not an object".to_string()) };
    if phase == Phase::Request && method == "tools/call" && object.get("name").and_then(|n| n.as_str()) != tool {
        return Err(format!("params for another tool than `{}` (a hook may not rename the tool)", tool.unwrap_or("")));
    }
    Ok(())
}
