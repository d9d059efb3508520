//! Rewrites `tools/list` results so each client sees the tools the plugin chain decided: the
//! annotations it gave them, and (0.2 plugins) which are shown to that client and by what name;
//! `prompts/list` and `resources/templates/list` results the same way (which, by what name,
//! with what title and description).

use std::collections::{HashMap, HashSet};

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use switchyard_core::codec::{span, splice_many};
use switchyard_core::decision::{Caller, Hints, Rejection};

use super::{Kind, ListedTool, Shown};

/// Hints as a server declared them in a tool's `annotations` object (None when absent).
pub fn declared_hints(annotations: Option<&Value>) -> Hints {
    let Some(a) = annotations else { return Hints::default() };
    let flag = |k: &str| a.get(k).and_then(Value::as_bool);
    Hints {
        read_only: flag("readOnlyHint"),
        destructive: flag("destructiveHint"),
        idempotent: flag("idempotentHint"),
        open_world: flag("openWorldHint"),
        title: a.get("title").and_then(Value::as_str).map(str::to_string),
    }
}

/// Writes `hints` into an `annotations` object under the spec names. A hint the chain left
/// unsaid (None) is removed only if the server had not said it either, so a plugin cannot
/// accidentally erase a server's own hint by returning None.
fn write_hints(annotations: &mut Map<String, Value>, hints: &Hints) {
    let flags = [
        ("readOnlyHint", hints.read_only),
        ("destructiveHint", hints.destructive),
        ("idempotentHint", hints.idempotent),
        ("openWorldHint", hints.open_world),
    ];
    for (key, value) in flags {
        if let Some(v) = value {
            annotations.insert(key.to_string(), Value::Bool(v));
        }
    }
    if let Some(t) = &hints.title {
        annotations.insert("title".to_string(), Value::String(t.clone()));
    }
}

#[derive(Deserialize)]
struct ToolView<'a> {
    name: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(borrow, default)]
    annotations: Option<&'a RawValue>,
}

/// What a client calls by another name than the server's, from the last list (of tools, or of
/// prompts) it was shown of a server: the name it was shown, to the server's name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ClientView {
    pub renamed: HashMap<String, String>,
    /// Server's names of items a plugin renamed onto a name another item of the list had: they
    /// are shown (and called) by their own names.
    pub unrenamed: HashSet<String>,
}

/// A `tools/list` result as one client is to see it.
#[derive(Debug, Default)]
pub struct Rewritten {
    /// The new result JSON; None when nothing changed.
    pub result: Option<String>,
    /// The renames in it (empty when none).
    pub view: ClientView,
}

/// Rewrites a `tools/list` result (the JSON text of `result`) for the client `caller`: see
/// [`rewrite_list`].
pub async fn rewrite_tools_list(
    set: &std::sync::Arc<super::PluginSet>,
    lane: &str,
    caller: &Caller,
    server: &str,
    result_json: &str,
) -> anyhow::Result<Rewritten> {
    rewrite_list(set, lane, caller, server, Kind::Tool, result_json).await
}

/// Rewrites a list result of `kind` (the JSON text of `result`) for the client `caller`
/// through the chain's list hook (on a plugin worker thread, in `lane`'s turn): items a plugin
/// hid are left out; renamed or reworded ones, and tools whose annotations changed, are
/// rewritten. Prompts and resource templates have no hints: what a plugin says of theirs is
/// not used.
///
/// Only what changed is re-serialised: a tool whose annotations alone changed gets a new
/// `annotations` object, and every other byte of the result (field order, numbers, unknown
/// newer fields) is copied through as the server sent it.
pub async fn rewrite_list(
    set: &std::sync::Arc<super::PluginSet>,
    lane: &str,
    caller: &Caller,
    server: &str,
    kind: Kind,
    result_json: &str,
) -> anyhow::Result<Rewritten> {
    if !set.reads_calls() {
        return Ok(Rewritten::default());
    }
    let method = kind.list_method();
    let unusable = |e: serde_json::Error| anyhow::anyhow!("{method} result from {server} is not usable: {e}");
    let mut fields: HashMap<String, &RawValue> = serde_json::from_str(result_json).map_err(unusable)?;
    let Some(items) = fields.remove(kind.list_key()) else {
        anyhow::bail!("{method} result from {server} is not usable: it has no `{}`", kind.list_key());
    };
    let raws: Vec<&RawValue> = serde_json::from_str(items.get()).map_err(unusable)?;
    // Each tool that parses, with its annotations as the server declared them.
    let mut tools = Vec::new();
    let mut asked = Vec::new();
    for raw in &raws {
        let Ok(tool) = serde_json::from_str::<ToolView<'_>>(raw.get()) else { continue };
        let declared_value: Option<Value> = tool.annotations.and_then(|a| serde_json::from_str(a.get()).ok());
        let declared = if kind == Kind::Tool { declared_hints(declared_value.as_ref()) } else { Hints::default() };
        asked.push(ListedTool {
            kind,
            server: server.to_string(),
            name: tool.name.clone(),
            title: tool.title.clone(),
            description: tool.description.clone(),
            declared,
        });
        tools.push((*raw, tool, declared_value));
    }
    let mut shown = set.list_tools_async(lane, caller, asked.clone(), true).await;
    let mut view = ClientView { unrenamed: undo_clashing_renames(&asked, &mut shown, caller), ..ClientView::default() };
    // (the tool's raw text, what replaces it: None to leave it out).
    let mut whole: Vec<(&RawValue, Option<String>)> = Vec::new();
    // (byte range in result_json, replacement text): edits that keep the rest as it was.
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    for (((raw, tool, declared_value), listed), mut shown) in tools.into_iter().zip(&asked).zip(shown) {
        if kind != Kind::Tool {
            // Only tools have annotations.
            shown.listing.hints = listed.declared.clone();
        }
        let l = &shown.listing;
        if l.hidden {
            whole.push((raw, None));
            continue;
        }
        if l.name != listed.name {
            view.renamed.insert(l.name.clone(), listed.name.clone());
        }
        let reworded = l.name != listed.name || l.title != listed.title || l.description != listed.description;
        if reworded {
            let mut obj: Map<String, Value> = serde_json::from_str(raw.get())?;
            obj.insert("name".to_string(), Value::String(l.name.clone()));
            for (key, value) in [("title", &l.title), ("description", &l.description)] {
                match value {
                    Some(v) => obj.insert(key.to_string(), Value::String(v.clone())),
                    None => obj.remove(key),
                };
            }
            if l.hints != listed.declared {
                let mut map = match declared_value {
                    Some(Value::Object(map)) => map,
                    _ => Map::new(),
                };
                write_hints(&mut map, &l.hints);
                obj.insert("annotations".to_string(), Value::Object(map));
            }
            whole.push((raw, Some(serde_json::to_string(&obj)?)));
            continue;
        }
        if l.hints == listed.declared {
            continue;
        }
        match (tool.annotations, declared_value) {
            (Some(ann_raw), Some(Value::Object(mut map))) => {
                write_hints(&mut map, &l.hints);
                edits.push((span(result_json, ann_raw.get()), serde_json::to_string(&map)?));
            }
            _ => {
                // No annotations object (or not an object): rebuild just this tool.
                let mut obj: Map<String, Value> = serde_json::from_str(raw.get())?;
                let mut map = Map::new();
                write_hints(&mut map, &l.hints);
                obj.insert("annotations".to_string(), Value::Object(map));
                whole.push((raw, Some(serde_json::to_string(&obj)?)));
            }
        }
    }
    if whole.iter().any(|(_, text)| text.is_none()) {
        // A tool left out: the array is written anew from its tools' texts (raw where unchanged).
        let mut texts: Vec<String> = Vec::new();
        for raw in &raws {
            let ptr = raw.get().as_ptr();
            let changed = whole.iter().find(|(r, _)| r.get().as_ptr() == ptr).map(|(_, t)| t.clone());
            let annotated = edits.iter().find(|(range, _)| {
                let at = span(result_json, raw.get());
                range.start >= at.start && range.end <= at.end
            });
            match (changed, annotated) {
                (Some(None), _) => {}
                (Some(Some(text)), _) => texts.push(text),
                (None, Some((range, text))) => {
                    let at = span(result_json, raw.get());
                    let inner = (range.start - at.start)..(range.end - at.start);
                    texts.push(splice_many(raw.get(), vec![(inner, text.as_str())]));
                }
                (None, None) => texts.push(raw.get().to_string()),
            }
        }
        let array = format!("[{}]", texts.join(","));
        let result = splice_many(result_json, vec![(span(result_json, items.get()), array.as_str())]);
        return Ok(Rewritten { result: Some(result), view });
    }
    for (raw, text) in whole {
        edits.push((span(result_json, raw.get()), text.expect("only left-out tools have none")));
    }
    if edits.is_empty() {
        return Ok(Rewritten { result: None, view });
    }
    let result = splice_many(result_json, edits.iter().map(|(range, text)| (range.clone(), text.as_str())).collect());
    Ok(Rewritten { result: Some(result), view })
}

/// A list with two items of one name cannot be called right (a call under that name reaches
/// one of them only): an item a plugin renamed onto a name another shown item has keeps its
/// own name, and the plugin is named in the log. Returns the server's names of those items.
fn undo_clashing_renames(asked: &[ListedTool], shown: &mut [Shown], caller: &Caller) -> HashSet<String> {
    let mut undone = HashSet::new();
    loop {
        let mut count: HashMap<String, usize> = HashMap::new();
        for s in shown.iter().filter(|s| !s.listing.hidden) {
            *count.entry(s.listing.name.clone()).or_default() += 1;
        }
        let clashing: Vec<usize> = (0..shown.len())
            .filter(|&i| {
                let l = &shown[i].listing;
                !l.hidden && l.name != asked[i].name && count[&l.name] > 1
            })
            .collect();
        if clashing.is_empty() {
            return undone;
        }
        for i in clashing {
            let (item, s) = (&asked[i], &mut shown[i]);
            tracing::warn!(
                server = %item.server,
                "{} renames the {} `{}` to `{}` for client `{}`, a name another {} of the list has: it is shown by its own name",
                s.renamed_by.as_deref().unwrap_or("a plugin"),
                item.kind.noun(),
                item.name,
                s.listing.name.escape_debug(),
                caller.name.as_deref().unwrap_or("(no name)").escape_debug(),
                item.kind.noun(),
            );
            s.listing.name = item.name.clone();
            s.renamed_by = None;
            undone.insert(item.name.clone());
        }
    }
}

/// A `tools/call` of tool `called` (or a `prompts/get` of prompt `called`) by `caller`, checked
/// against what the chain shows that client: Ok(Some(the server's name)) when `called` is the
/// name a plugin gave the item for this client (from `view`, its last list of the server);
/// Ok(None) to ask for it as named; Err when a plugin hides the item from this client, or shows
/// it under another name (the mapping is exact: a renamed item is asked for by its new name
/// only). `listed` gives what the server listed of an item by its name (its kind, title,
/// description and declared hints, as far as known).
pub async fn check_call(
    set: &std::sync::Arc<super::PluginSet>,
    lane: &str,
    caller: &Caller,
    view: Option<&ClientView>,
    called: &str,
    listed: impl FnOnce(&str) -> ListedTool,
) -> Result<Option<String>, Rejection> {
    let original = view.and_then(|v| v.renamed.get(called)).cloned();
    let tool = listed(original.as_deref().unwrap_or(called));
    let shown = set.list_tools_async(lane, caller, vec![tool.clone()], false).await.pop();
    let Some(shown) = shown else { return Ok(original) };
    let client = caller.name.as_deref().unwrap_or("(a client that gave no name)");
    let what = tool.kind.noun();
    if let Some(plugin) = shown.hidden_by {
        // Said so that a model reading it stops asking for the item rather than retrying.
        let reason = format!(
            "{what} `{called}` is not available to client `{client}`: this plugin hides it from that client, so it was not sent to the server{}",
            if tool.kind == Kind::Tool { "; use another tool" } else { "" }
        );
        return Err(Rejection::new(plugin, reason));
    }
    // A rename that clashed in the client's list was not shown: the item goes by its own name.
    let kept_own = original.is_none() && view.is_some_and(|v| v.unrenamed.contains(called));
    if shown.listing.name != called && !kept_own {
        let plugin = shown.renamed_by.unwrap_or_else(|| "switchyard".to_string());
        let reason = format!(
            "client `{client}` is shown this server's {what} `{}` as `{}`; {} it by that name",
            original.as_deref().unwrap_or(called),
            shown.listing.name,
            if tool.kind == Kind::Tool { "call" } else { "ask for" },
        );
        return Err(Rejection::new(plugin, reason));
    }
    Ok(original)
}
