//! Rewrites `tools/list` results so clients see the annotations the plugin chain decided.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use switchyard_core::codec::{span, splice_many};
use switchyard_core::decision::Hints;

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

/// The parts of a `tools/list` result this module reads; everything else stays raw text.
#[derive(Deserialize)]
struct ListResult<'a> {
    #[serde(borrow)]
    tools: Vec<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolView<'a> {
    name: String,
    #[serde(borrow, default)]
    annotations: Option<&'a RawValue>,
}

/// Rewrites a `tools/list` result (the JSON text of `result`) through the chain's `annotate`
/// (on a plugin worker thread, in `lane`'s turn): Some(new result JSON) when any tool's
/// annotations changed, None when nothing changed.
///
/// Only the `annotations` object of a changed tool is re-serialised; every other byte of the
/// result (field order, numbers, unknown newer fields) is copied through as the server sent it.
pub async fn rewrite_tools_list(
    set: &std::sync::Arc<super::PluginSet>,
    lane: &str,
    server: &str,
    result_json: &str,
) -> anyhow::Result<Option<String>> {
    if !set.reads_calls() {
        return Ok(None);
    }
    let list: ListResult<'_> = serde_json::from_str(result_json)
        .map_err(|e| anyhow::anyhow!("tools/list result from {server} is not usable: {e}"))?;
    let mut tools = Vec::new();
    for raw in &list.tools {
        let Ok(tool) = serde_json::from_str::<ToolView<'_>>(raw.get()) else { continue };
        let declared_value: Option<Value> = tool.annotations.and_then(|a| serde_json::from_str(a.get()).ok());
        let declared = declared_hints(declared_value.as_ref());
        tools.push((raw, tool, declared_value, declared));
    }
    let asked = tools.iter().map(|(_, tool, _, declared)| (tool.name.clone(), declared.clone())).collect();
    let effective = set.annotate_async(lane, server, asked).await;
    // (byte range in result_json, replacement text).
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    for ((raw, tool, declared_value, declared), effective) in tools.into_iter().zip(effective) {
        if effective == declared {
            continue;
        }
        match (tool.annotations, declared_value) {
            (Some(ann_raw), Some(Value::Object(mut map))) => {
                write_hints(&mut map, &effective);
                edits.push((span(result_json, ann_raw.get()), serde_json::to_string(&map)?));
            }
            _ => {
                // No annotations object (or not an object): rebuild just this tool.
                let mut obj: Map<String, Value> = serde_json::from_str(raw.get())?;
                let mut map = Map::new();
                write_hints(&mut map, &effective);
                obj.insert("annotations".to_string(), Value::Object(map));
                edits.push((span(result_json, raw.get()), serde_json::to_string(&obj)?));
            }
        }
    }
    if edits.is_empty() {
        return Ok(None);
    }
    Ok(Some(splice_many(result_json, edits.iter().map(|(range, text)| (range.clone(), text.as_str())).collect())))
}
