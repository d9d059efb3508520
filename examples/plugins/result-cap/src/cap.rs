//! How `result-cap` cuts a result: text is shortened from its end, other items that do not fit
//! are dropped, and a note says what was cut and how to ask for less.

use plugin_util::content::cut_at;
use serde_json::{Map, Value, json};

/// The smallest cap accepted: room for the note and a little of the text.
pub const MIN_BYTES: usize = 1024;
/// The cap when the config gives none.
pub const DEFAULT_BYTES: usize = 256 * 1024;

/// The cap of one call: `max_bytes` of its result as JSON text, and the advice the note gives.
#[derive(Debug, Clone)]
pub struct Cap {
    pub max_bytes: usize,
    pub hint: String,
}

/// The advice when the config gives none.
pub const DEFAULT_HINT: &str = "ask for less: a narrower range or path, a smaller page or limit, or a filter";

impl Cap {
    /// Reads `max_bytes` and `hint` from `obj` (whose place in the config is `at`), defaults
    /// from `base`.
    pub fn from_json(obj: &Map<String, Value>, at: &str, base: &Cap) -> Result<Cap, String> {
        let max_bytes = match obj.get("max_bytes") {
            None => base.max_bytes,
            Some(v) => {
                let n = v.as_u64().ok_or_else(|| format!("{at}max_bytes must be a whole number of bytes"))?;
                let n = usize::try_from(n).map_err(|_| format!("{at}max_bytes is too large"))?;
                if n < MIN_BYTES {
                    return Err(format!("{at}max_bytes is {n}; it is at least {MIN_BYTES} (room for the note)"));
                }
                n
            }
        };
        let hint = match obj.get("hint") {
            None => base.hint.clone(),
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(_) => return Err(format!("{at}hint must be a non-empty string")),
        };
        Ok(Cap { max_bytes, hint })
    }

    /// The result cut to fit, or `None` when it fits as it is. `size` is the length of the
    /// result's JSON text as the server sent it.
    pub fn apply(&self, result: &Value, size: usize) -> Option<Value> {
        if size <= self.max_bytes {
            return None;
        }
        let mut out = result.clone();
        let obj = out.as_object_mut()?;
        // The note goes last, in the words a model reads; it is small and bounded.
        let note_room = 200 + self.hint.len();
        let mut budget = self.max_bytes.saturating_sub(note_room).saturating_sub(envelope(obj));
        let mut dropped = 0;
        if let Some(s) = obj.get("structuredContent") {
            let len = json_len(s);
            if len > budget / 2 {
                // Structured content cannot be cut and stay valid: it goes whole, the text
                // (which carries the same data for a model) is cut instead.
                obj.remove("structuredContent");
                dropped += 1;
            } else {
                budget -= len;
            }
        }
        if let Some(Value::Array(items)) = obj.get_mut("content") {
            dropped += fit_items(items, &mut budget);
        }
        if let Some(Value::Array(items)) = obj.get_mut("contents") {
            dropped += fit_items(items, &mut budget);
        }
        let kept = serde_json::to_string(&out).map(|s| s.len()).unwrap_or(size);
        let note = self.note(size, kept, dropped);
        push_note(&mut out, note);
        Some(out)
    }

    fn note(&self, size: usize, kept: usize, dropped: usize) -> String {
        let cut = size.saturating_sub(kept);
        let items = match dropped {
            0 => String::new(),
            1 => " (1 part left out whole)".to_string(),
            n => format!(" ({n} parts left out whole)"),
        };
        format!(
            "[result-cap: this result was {size} bytes, over the limit of {} bytes; the last {cut} bytes were cut{items}. To see the rest, {}.]",
            self.max_bytes, self.hint
        )
    }
}

/// The bytes of the result's JSON besides its content: what cannot be cut.
fn envelope(obj: &Map<String, Value>) -> usize {
    obj.iter()
        .filter(|(k, _)| !matches!(k.as_str(), "content" | "contents" | "structuredContent"))
        .map(|(k, v)| k.len() + 4 + json_len(v))
        .sum::<usize>()
        + 32
}

fn json_len(v: &Value) -> usize {
    serde_json::to_string(v).map(|s| s.len()).unwrap_or(usize::MAX)
}

/// Keeps the items that fit in `budget` in order, cutting the first text that does not fit and
/// dropping everything after it. Returns how many items were dropped whole.
fn fit_items(items: &mut Vec<Value>, budget: &mut usize) -> usize {
    let mut keep = 0;
    for item in items.iter_mut() {
        let len = json_len(item);
        if len <= *budget {
            *budget -= len;
            keep += 1;
            continue;
        }
        let frame = len - text_of(item).map_or(0, |t| json_str_len(t));
        let room = budget.saturating_sub(frame);
        if let Some(text) = text_of(item).filter(|_| room > 64) {
            let end = cut_to_json_len(text, room);
            text.truncate(end);
            keep += 1;
        }
        *budget = 0;
        break;
    }
    let dropped = items.len() - keep;
    items.truncate(keep);
    dropped
}

/// How many bytes of `text` to keep so that its JSON string is at most `room` bytes: escapes
/// make the JSON of a text longer than the text.
fn cut_to_json_len(text: &str, room: usize) -> usize {
    let mut len = room.min(text.len());
    loop {
        let cut = cut_at(text, len);
        let over = json_str_len(cut).saturating_sub(room);
        if over == 0 {
            return cut.len();
        }
        len = cut.len().saturating_sub(over.max(1));
    }
}

/// The length of `s` as a JSON string (quotes and escapes included), as serde_json writes it.
fn json_str_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

/// The text of a text item, or of a resource's text (content item or `resources/read` entry).
fn text_of(item: &mut Value) -> Option<&mut String> {
    let holder = match item.get("type").and_then(Value::as_str) {
        Some("resource") => item.get_mut("resource")?,
        _ => item,
    };
    match holder.get_mut("text") {
        Some(Value::String(t)) => Some(t),
        _ => None,
    }
}

/// Adds the note as the last text item the model reads: a `content` item, or for a
/// `resources/read` result a `contents` entry of its own.
fn push_note(out: &mut Value, note: String) {
    let Some(obj) = out.as_object_mut() else { return };
    if let Some(Value::Array(contents)) = obj.get_mut("contents") {
        let uri = contents.first().and_then(|c| c.get("uri")).cloned().unwrap_or(json!(""));
        contents.push(json!({"uri": uri, "mimeType": "text/plain", "text": note}));
        return;
    }
    match obj.get_mut("content") {
        Some(Value::Array(items)) => items.push(json!({"type": "text", "text": note})),
        _ => {
            obj.insert("content".into(), json!([{"type": "text", "text": note}]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(max_bytes: usize) -> Cap {
        Cap { max_bytes, hint: DEFAULT_HINT.to_string() }
    }

    fn size(v: &Value) -> usize {
        serde_json::to_string(v).unwrap().len()
    }

    fn texts(v: &Value) -> Vec<String> {
        v["content"].as_array().unwrap().iter().map(|i| i["text"].as_str().unwrap_or("").to_string()).collect()
    }

    #[test]
    fn a_result_under_the_cap_is_left_alone() {
        let r = json!({"content": [{"type": "text", "text": "small"}]});
        assert_eq!(cap(2048).apply(&r, size(&r)), None);
    }

    #[test]
    fn a_long_text_is_cut_to_the_cap_with_a_note_that_says_how_much() {
        let text = "0123456789".repeat(1000);
        let r = json!({"content": [{"type": "text", "text": text}], "isError": false});
        let out = cap(4096).apply(&r, size(&r)).unwrap();
        assert!(size(&out) <= 4096, "{} bytes", size(&out));
        let t = texts(&out);
        assert_eq!(t.len(), 2);
        assert!(text.starts_with(&t[0]) && t[0].len() > 3000, "kept {} bytes of the text", t[0].len());
        let note = &t[1];
        assert!(note.contains(&format!("this result was {} bytes", size(&r))), "{note}");
        assert!(note.contains("limit of 4096 bytes") && note.contains("ask for less"), "{note}");
        let cut = size(&r) - (size(&out) - size(&json!({"type": "text", "text": note})) - 1);
        assert!(note.contains(&format!("the last {cut} bytes were cut")), "{note} (cut {cut})");
        assert_eq!(out["isError"], json!(false));
    }

    #[test]
    fn escapes_and_wide_characters_are_counted_as_sent() {
        let text = "\"é\n".repeat(5000);
        let r = json!({"content": [{"type": "text", "text": text}]});
        let out = cap(2048).apply(&r, size(&r)).unwrap();
        assert!(size(&out) <= 2048, "{} bytes", size(&out));
        assert!(text.starts_with(&texts(&out)[0]));
    }

    #[test]
    fn the_json_length_of_a_text_is_what_serde_writes() {
        for s in ["", "plain", "\"q\" \\ \n\r\t\u{8}\u{c}", "\u{1}\u{1f}\u{7f}", "é✓𝄞"] {
            assert_eq!(json_str_len(s), serde_json::to_string(s).unwrap().len(), "{s:?}");
        }
    }

    #[test]
    fn items_after_the_cut_are_left_out_and_counted() {
        let r = json!({"content": [
            {"type": "text", "text": "a".repeat(3000)},
            {"type": "image", "data": "x".repeat(3000), "mimeType": "image/png"},
            {"type": "text", "text": "c"}
        ]});
        let out = cap(2048).apply(&r, size(&r)).unwrap();
        let items = out["content"].as_array().unwrap();
        assert_eq!(items.len(), 2, "the cut text and the note");
        assert!(items[1]["text"].as_str().unwrap().contains("(2 parts left out whole)"));
    }

    #[test]
    fn structured_content_too_large_goes_whole() {
        let r = json!({"content": [{"type": "text", "text": "b".repeat(3000)}],
                       "structuredContent": {"rows": ["r".repeat(3000)]}});
        let out = cap(2048).apply(&r, size(&r)).unwrap();
        assert!(out.get("structuredContent").is_none());
        assert!(size(&out) <= 2048);
        assert!(texts(&out)[1].contains("(1 part left out whole)"));
    }

    #[test]
    fn a_resource_read_gets_its_note_as_a_text_entry() {
        let r = json!({"contents": [{"uri": "file:///big", "mimeType": "text/plain", "text": "z".repeat(5000)}]});
        let out = cap(2048).apply(&r, size(&r)).unwrap();
        let contents = out["contents"].as_array().unwrap();
        assert_eq!(contents.len(), 2);
        assert_eq!(contents[1]["uri"], json!("file:///big"));
        assert!(contents[1]["text"].as_str().unwrap().starts_with("[result-cap:"));
        assert!(size(&out) <= 2048);
    }

    #[test]
    fn the_config_is_checked() {
        let base = cap(DEFAULT_BYTES);
        let ok =
            Cap::from_json(json!({"max_bytes": 4096, "hint": "use offset"}).as_object().unwrap(), "", &base).unwrap();
        assert_eq!((ok.max_bytes, ok.hint.as_str()), (4096, "use offset"));
        for (v, says) in [
            (json!({"max_bytes": 10}), "at least 1024"),
            (json!({"max_bytes": "big"}), "whole number"),
            (json!({"hint": ""}), "non-empty"),
        ] {
            let e = Cap::from_json(v.as_object().unwrap(), "tools.x.", &base).unwrap_err();
            assert!(e.contains(says) && e.starts_with("tools.x."), "{v}: {e}");
        }
    }
}
