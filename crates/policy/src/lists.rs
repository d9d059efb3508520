//! The chain's answers about listed items: how each tool (prompt, resource template) a server
//! lists is shown to each client (the 0.2 `list-tool` hook), and the answers kept per set.

use std::collections::HashMap;
use std::sync::Arc;

use switchyard_core::decision::{Caller, Hints};

use super::{PluginSet, Runs, guarded, worker};

/// What a server lists that the list hook judges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Kind {
    #[default]
    Tool,
    Prompt,
    ResourceTemplate,
}

impl Kind {
    /// The kind a list method lists (`tools/list`, `prompts/list`, `resources/templates/list`).
    pub fn of_list_method(method: &str) -> Option<Kind> {
        Some(match method {
            "tools/list" => Kind::Tool,
            "prompts/list" => Kind::Prompt,
            "resources/templates/list" => Kind::ResourceTemplate,
            _ => return None,
        })
    }

    pub fn list_method(self) -> &'static str {
        match self {
            Kind::Tool => "tools/list",
            Kind::Prompt => "prompts/list",
            Kind::ResourceTemplate => "resources/templates/list",
        }
    }

    /// The field of the list result that holds the items.
    pub fn list_key(self) -> &'static str {
        match self {
            Kind::Tool => "tools",
            Kind::Prompt => "prompts",
            Kind::ResourceTemplate => "resourceTemplates",
        }
    }

    /// What errors call one.
    pub fn noun(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Prompt => "prompt",
            Kind::ResourceTemplate => "resource template",
        }
    }
}

/// A tool (or prompt, or resource template) as a server listed it: what the list hook is shown.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListedTool {
    pub kind: Kind,
    pub server: String,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub declared: Hints,
}

/// How a tool is shown to one client (the tool-list hook's answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub hidden: bool,
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub hints: Hints,
}

impl Listing {
    /// The tool as the server listed it.
    pub fn of(tool: &ListedTool) -> Listing {
        Listing {
            hidden: false,
            name: tool.name.clone(),
            title: tool.title.clone(),
            description: tool.description.clone(),
            hints: tool.declared.clone(),
        }
    }

    pub(crate) fn with_hints(mut self, hints: Hints) -> Listing {
        self.hints = hints;
        self
    }
}

/// What the whole chain made of one listed tool for one client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub listing: Listing,
    /// The plugin that hid it (the chain stops there).
    pub hidden_by: Option<String>,
    /// The last plugin that gave it another name.
    pub renamed_by: Option<String>,
}

/// How many (item, client) answers of the list hook a set keeps at most; past it they are all
/// dropped and asked again.
const SHOWN_KEPT: usize = 65_536;

/// What the list hook made of each listed item for each client, kept for the life of one
/// plugin set: `list-tool`'s answer depends on the item and the client only (the contract says
/// so), so a call checked against what its client is shown, or a list asked again, costs no
/// plugin call once the item was judged for that client. A new set (a plugin changed) starts
/// empty, and an item listed anew with other words or hints is another key.
#[derive(Default)]
pub(crate) struct ShownKept {
    /// (answers kept, item -> client -> answer).
    map: std::sync::Mutex<(usize, ShownByItem)>,
}

/// The list hook's answers, by item, then by client.
type ShownByItem = HashMap<ListedTool, HashMap<Caller, Shown>>;

impl ShownKept {
    fn get(&self, tool: &ListedTool, caller: &Caller) -> Option<Shown> {
        self.map.lock().expect("lock").1.get(tool)?.get(caller).cloned()
    }

    fn put(&self, tool: &ListedTool, caller: &Caller, shown: &Shown) {
        let mut kept = self.map.lock().expect("lock");
        let (count, map) = &mut *kept;
        if *count >= SHOWN_KEPT {
            map.clear();
            *count = 0;
        }
        if map.entry(tool.clone()).or_default().insert(caller.clone(), shown.clone()).is_none() {
            *count += 1;
        }
    }
}

impl PluginSet {
    /// [`PluginSet::list_tools`] on a plugin worker thread in `lane`'s turn. With no plugins it
    /// answers at once: every tool as listed. If the worker fails, the tools are shown as the
    /// server listed them.
    /// `record`: what the chain made of them goes to the recorder (a listing does; the check of
    /// a call does not).
    pub async fn list_tools_async(
        self: &Arc<Self>,
        lane: &str,
        caller: &Caller,
        tools: Vec<ListedTool>,
        record: bool,
    ) -> Vec<Shown> {
        let unchanged = |tools: &[ListedTool]| -> Vec<Shown> {
            tools.iter().map(|t| Shown { listing: Listing::of(t), hidden_by: None, renamed_by: None }).collect()
        };
        if self.chain.is_empty() {
            if let Some(r) = self.recorder.as_ref().filter(|_| record) {
                for t in &tools {
                    r.listed(t, caller, &Listing::of(t));
                }
            }
            return unchanged(&tools);
        }
        // Answers the set has given before come at once, without a turn on a plugin thread.
        let kept: Option<Vec<Shown>> = tools.iter().map(|t| self.shown.get(t, caller)).collect();
        if let Some(shown) = kept {
            if let Some(r) = self.recorder.as_ref().filter(|_| record) {
                for (t, s) in tools.iter().zip(&shown) {
                    r.listed(t, caller, &s.listing);
                }
            }
            return shown;
        }
        let set = self.clone();
        let caller = caller.clone();
        let now = tokio::time::Instant::now();
        let fallback = unchanged(&tools);
        let run =
            worker::run(lane, move || tools.iter().map(|t| set.list_tool(t, &caller, now, record)).collect::<Vec<_>>());
        run.await.unwrap_or_else(|e| {
            tracing::warn!("tools shown as the server listed them: {e}");
            fallback
        })
    }

    /// How `tool` is shown to `caller`, on the calling thread (not an async runtime thread):
    /// the listing passed through every plugin that applies to its server, in chain order. A
    /// plugin that hides it ends the chain. A failing plugin is skipped, as for annotations.
    /// An answer given before for the same item and client is given again without asking.
    pub fn list_tool(&self, tool: &ListedTool, caller: &Caller, now: tokio::time::Instant, record: bool) -> Shown {
        let shown = match self.shown.get(tool, caller) {
            Some(shown) => shown,
            None => {
                let (shown, every_plugin_answered) = self.ask_list_hook(tool, caller, now);
                // An answer with a plugin skipped for failing is not kept: it may answer next time.
                if every_plugin_answered {
                    self.shown.put(tool, caller, &shown);
                }
                shown
            }
        };
        if let Some(r) = self.recorder.as_ref().filter(|_| record) {
            r.listed(tool, caller, &shown.listing);
        }
        shown
    }

    /// [`PluginSet::list_tool`] asked of the plugins, and whether none of them failed.
    fn ask_list_hook(&self, tool: &ListedTool, caller: &Caller, now: tokio::time::Instant) -> (Shown, bool) {
        let mut answered = true;
        let mut shown = Shown { listing: Listing::of(tool), hidden_by: None, renamed_by: None };
        for p in self.chain.iter().filter(|p| p.applies_to(&tool.server)) {
            let Runs::Ready(plugin) = &p.plugin else { continue };
            let started = std::time::Instant::now();
            let answer = guarded(|| plugin.list_tool(tool, caller, &shown.listing, now));
            self.measured(&p.label, "list_tool", started, &answer);
            match answer {
                Ok(l) => {
                    if l.name != shown.listing.name {
                        shown.renamed_by = Some(p.name.clone());
                    }
                    let hidden = l.hidden;
                    shown.listing = l;
                    if hidden {
                        shown.hidden_by = Some(p.name.clone());
                        break;
                    }
                }
                Err(e) => {
                    answered = false;
                    let note = format!("list-tool of {} `{}` skipped: the plugin {e}", tool.kind.noun(), tool.name);
                    plugin.output().line(tracing::Level::WARN, "switchyard", &note);
                }
            }
        }
        (shown, answered)
    }
}
