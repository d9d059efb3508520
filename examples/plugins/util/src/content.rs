//! The text a result carries for the model, found in every shape MCP gives it: content plugins
//! (`redact`, `result-cap`) change that text and nothing else.

use serde_json::Value;

/// Calls `f` on every text of `result`, in document order: the `text` of each `content` item of
/// type `text` (`tools/call`), the `resource.text` of an embedded resource item, the string
/// values inside `structuredContent`, the `text` of each of `contents` (`resources/read`) and
/// of each message's `content` (`prompts/get`). Blobs, images, audio, URIs, MIME types and ids
/// are never touched.
pub fn texts_mut(result: &mut Value, f: &mut dyn FnMut(&mut String)) {
    let Some(obj) = result.as_object_mut() else { return };
    if let Some(Value::Array(items)) = obj.get_mut("content") {
        items.iter_mut().for_each(|item| item_texts_mut(item, f));
    }
    if let Some(structured) = obj.get_mut("structuredContent") {
        strings_mut(structured, f);
    }
    if let Some(Value::Array(contents)) = obj.get_mut("contents") {
        for c in contents {
            if let Some(Value::String(t)) = c.get_mut("text") {
                f(t);
            }
        }
    }
    if let Some(Value::Array(messages)) = obj.get_mut("messages") {
        for m in messages {
            if let Some(c) = m.get_mut("content") {
                item_texts_mut(c, f);
            }
        }
    }
}

/// One content item: its text, or an embedded resource's text.
fn item_texts_mut(item: &mut Value, f: &mut dyn FnMut(&mut String)) {
    match item.get("type").and_then(Value::as_str) {
        Some("text") => {
            if let Some(Value::String(t)) = item.get_mut("text") {
                f(t);
            }
        }
        Some("resource") => {
            if let Some(Value::String(t)) = item.get_mut("resource").and_then(|r| r.get_mut("text")) {
                f(t);
            }
        }
        _ => {}
    }
}

/// Every string value inside `v` (object keys stay as they are: they are the schema's names).
fn strings_mut(v: &mut Value, f: &mut dyn FnMut(&mut String)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(a) => a.iter_mut().for_each(|v| strings_mut(v, f)),
        Value::Object(o) => o.values_mut().for_each(|v| strings_mut(v, f)),
        _ => {}
    }
}

/// The longest prefix of `s` at most `max` bytes long that ends on a character boundary.
pub fn cut_at(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn upper(v: &mut Value) -> &Value {
        texts_mut(v, &mut |t| *t = t.to_uppercase());
        v
    }

    #[test]
    fn only_the_text_meant_for_the_model_is_visited() {
        let mut call = json!({"content": [
            {"type": "text", "text": "a"},
            {"type": "image", "data": "aW1n", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///x", "text": "b", "mimeType": "text/plain"}},
            {"type": "resource", "resource": {"uri": "file:///y", "blob": "YmxvYg=="}}
        ], "structuredContent": {"name": "c", "list": ["d", 1]}, "isError": false});
        assert_eq!(
            upper(&mut call),
            &json!({"content": [
                {"type": "text", "text": "A"},
                {"type": "image", "data": "aW1n", "mimeType": "image/png"},
                {"type": "resource", "resource": {"uri": "file:///x", "text": "B", "mimeType": "text/plain"}},
                {"type": "resource", "resource": {"uri": "file:///y", "blob": "YmxvYg=="}}
            ], "structuredContent": {"name": "C", "list": ["D", 1]}, "isError": false})
        );
        let mut read = json!({"contents": [{"uri": "file:///z", "text": "e"}, {"uri": "u", "blob": "eA=="}]});
        assert_eq!(
            upper(&mut read),
            &json!({"contents": [{"uri": "file:///z", "text": "E"}, {"uri": "u", "blob": "eA=="}]})
        );
        let mut prompt = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "f"}}]});
        assert_eq!(
            upper(&mut prompt),
            &json!({"messages": [{"role": "user", "content": {"type": "text", "text": "F"}}]})
        );
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        assert_eq!(cut_at("héllo", 2), "h");
        assert_eq!(cut_at("héllo", 3), "hé");
        assert_eq!(cut_at("hi", 10), "hi");
    }
}
