//! How `result-cap` cuts a result: text is shortened from its end, other items that do not fit
//! are dropped, the long strings of `structuredContent` are shortened in place (so that it
//! stays valid against the tool's output schema), and a note says what was cut and how to ask
//! for less.

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
    pub fn apply(&self, mut out: Value, size: usize) -> Option<Value> {
        if size <= self.max_bytes {
            return None;
        }
        let obj = out.as_object_mut()?;
        let text_before = text_len(obj);
        // The note goes last, in the words a model reads; it is small and bounded.
        let note_room = 300 + self.hint.len();
        let mut budget = self.max_bytes.saturating_sub(note_room).saturating_sub(envelope(obj));
        let has_content = obj.contains_key("content") || obj.contains_key("contents");
        let mut structured_cut = false;
        if let Some(s) = obj.get_mut("structuredContent") {
            // It has to stay valid against the tool's output schema (clients check it): same
            // keys, same types; only its long strings are shortened. It usually carries the
            // same data as the text: each gets half the room.
            let share = if has_content { budget / 2 } else { budget };
            let len = json_len(s);
            if len > share {
                let mut over = len - share;
                cut_strings(s, &mut over);
                structured_cut = true;
            }
            budget = budget.saturating_sub(json_len(s));
        }
        let mut dropped = 0;
        if let Some(Value::Array(items)) = obj.get_mut("content") {
            dropped += fit_items(items, &mut budget);
        }
        if let Some(Value::Array(items)) = obj.get_mut("contents") {
            dropped += fit_items(items, &mut budget);
        }
        let cut = Cut { text_before, text_after: text_len(obj), dropped, structured: structured_cut };
        let note = self.note(&cut);
        push_note(&mut out, note);
        Some(out)
    }

    fn note(&self, cut: &Cut) -> String {
        let Cut { text_before, text_after, dropped, structured } = *cut;
        let mut said = format!(
            "[result-cap: this result was cut to fit a limit of {} bytes. Its text was {text_before} bytes: \
             the first {text_after} bytes are above, the last {} bytes were cut",
            self.max_bytes,
            text_before - text_after
        );
        match dropped {
            0 => {}
            1 => said.push_str("; 1 more part after them (an image, a resource, a text) was left out"),
            n => said.push_str(&format!("; {n} more parts after them (images, resources, texts) were left out")),
        }
        if structured {
            said.push_str("; the long strings of its structuredContent were cut the same way");
        }
        format!("{said}. To see the rest, {}.]", self.hint)
    }
}

/// What [`Cap::apply`] cut, for its note.
struct Cut {
    /// The bytes of text of the content items (or `resources/read` entries), before and after.
    text_before: usize,
    text_after: usize,
    /// Items left out whole.
    dropped: usize,
    /// Whether strings of `structuredContent` were shortened.
    structured: bool,
}

/// Strings of `structuredContent` this long or shorter are never cut: names, ids, values of an
/// enum, which a schema may pin.
const SHORT: usize = 64;

/// Shortens the long strings of `v` from its end backwards, each from its own end, until `over`
/// bytes of JSON are gone (or no long string is left): keys, numbers, booleans and the shape
/// stay as they are.
fn cut_strings(v: &mut Value, over: &mut usize) {
    match v {
        Value::String(s) if *over > 0 && s.len() > SHORT => {
            let have = json_str_len(s);
            let room = have.saturating_sub(*over).max(json_str_len(cut_at(s, SHORT)));
            let end = cut_to_json_len(s, room);
            *over = over.saturating_sub(have - json_str_len(&s[..end]));
            s.truncate(end);
        }
        Value::Array(items) => items.iter_mut().rev().for_each(|i| cut_strings(i, over)),
        Value::Object(map) => map.iter_mut().rev().for_each(|(_, i)| cut_strings(i, over)),
        _ => {}
    }
}

/// The bytes of text of a result's content items or `resources/read` entries.
fn text_len(obj: &mut Map<String, Value>) -> usize {
    let mut n = 0;
    for key in ["content", "contents"] {
        if let Some(Value::Array(items)) = obj.get_mut(key) {
            n += items.iter_mut().filter_map(text_of).map(|t| t.len()).sum::<usize>();
        }
    }
    n
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
        assert_eq!(cap(2048).apply(r.clone(), size(&r)), None);
    }

    #[test]
    fn a_long_text_is_cut_to_the_cap_with_a_note_that_says_how_much() {
        let text = "0123456789".repeat(1000);
        let r = json!({"content": [{"type": "text", "text": text}], "isError": false});
        let out = cap(4096).apply(r.clone(), size(&r)).unwrap();
        assert!(size(&out) <= 4096, "{} bytes", size(&out));
        let t = texts(&out);
        assert_eq!(t.len(), 2);
        assert!(text.starts_with(&t[0]) && t[0].len() > 3000, "kept {} bytes of the text", t[0].len());
        let note = &t[1];
        assert!(note.contains("a limit of 4096 bytes") && note.contains("ask for less"), "{note}");
        // In the terms of the text the model would have read, not of the JSON around it.
        let (kept, cut) = (t[0].len(), 10_000 - t[0].len());
        let said =
            format!("Its text was 10000 bytes: the first {kept} bytes are above, the last {cut} bytes were cut.");
        assert!(note.contains(&said), "{note}");
        assert_eq!(out["isError"], json!(false));
    }

    #[test]
    fn escapes_and_wide_characters_are_counted_as_sent() {
        let text = "\"é\n".repeat(5000);
        let r = json!({"content": [{"type": "text", "text": text}]});
        let out = cap(2048).apply(r.clone(), size(&r)).unwrap();
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
        let out = cap(2048).apply(r.clone(), size(&r)).unwrap();
        let items = out["content"].as_array().unwrap();
        assert_eq!(items.len(), 2, "the cut text and the note");
        let note = items[1]["text"].as_str().unwrap();
        assert!(note.contains("; 2 more parts after them (images, resources, texts) were left out."), "{note}");
    }

    /// server-filesystem's read_text_file declares an output schema and sends the text twice:
    /// clients refuse a result without its structuredContent, so it stays, with the same keys
    /// and types, its long strings cut from their end like the text.
    #[test]
    fn structured_content_keeps_its_shape_and_its_long_strings_are_cut() {
        let text = "a line of a file\n".repeat(20_000);
        let r = json!({"content": [{"type": "text", "text": text}], "structuredContent": {"content": text}});
        let out = cap(16 * 1024).apply(r.clone(), size(&r)).unwrap();
        assert!(size(&out) <= 16 * 1024, "{} bytes", size(&out));
        let s = out["structuredContent"].as_object().expect("structuredContent is kept");
        let kept = s["content"].as_str().expect("a string still");
        assert!(s.len() == 1 && text.starts_with(kept) && kept.len() > 4000, "kept {} bytes", kept.len());
        let t = texts(&out);
        assert!(text.starts_with(&t[0]) && t[0].len() > 4000, "kept {} bytes of the text", t[0].len());
        let said = format!("Its text was {} bytes: the first {} bytes are above", text.len(), t[0].len());
        assert!(t[1].contains(&said) && t[1].contains("structuredContent were cut the same way"), "{}", t[1]);
        assert!(!t[1].contains("left out"), "{}", t[1]);
    }

    #[test]
    fn short_strings_numbers_and_keys_of_structured_content_stay_as_they_are() {
        let r = json!({"content": [{"type": "text", "text": "b".repeat(3000)}],
                       "structuredContent": {"kind": "file", "size": 9000, "ok": true, "rows": ["r".repeat(3000), "s".repeat(3000)]}});
        let out = cap(2048).apply(r.clone(), size(&r)).unwrap();
        let s = &out["structuredContent"];
        assert_eq!((&s["kind"], &s["size"], &s["ok"]), (&json!("file"), &json!(9000), &json!(true)));
        let rows = s["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "no item of an array is dropped");
        // Cut from the end backwards: the last string first, each keeping its first 64 bytes.
        assert_eq!(rows[1].as_str().unwrap(), "s".repeat(SHORT));
        assert!(rows[0].as_str().unwrap().len() < 3000);
        assert!(size(&out) <= 2048, "{} bytes", size(&out));
    }

    #[test]
    fn a_resource_read_gets_its_note_as_a_text_entry() {
        let r = json!({"contents": [{"uri": "file:///big", "mimeType": "text/plain", "text": "z".repeat(5000)}]});
        let out = cap(2048).apply(r.clone(), size(&r)).unwrap();
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
