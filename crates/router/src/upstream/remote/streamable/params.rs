//! `Mcp-Param-*` headers (2026-07-28): a tool's `inputSchema` may mark a property with
//! `x-mcp-header: NAME`, and a `tools/call` of that tool then mirrors the argument's value in the
//! header `Mcp-Param-NAME`, so that balancers and gateways can route on it without reading the
//! body. A server of that era checks header against body and refuses a call whose header is
//! missing while the argument is present (HTTP 400, -32020): so switchyard, as the server's
//! client, sends them, from the tool lists it has seen.

use std::collections::HashMap;
use std::sync::RwLock;

use serde_json::Value;

/// The schema types a header may mirror (a `number` may not: its text is not portable).
const MIRRORED_TYPES: &[&str] = &["string", "integer", "boolean"];

/// Which argument each tool mirrors in which header, learnt from the server's tool lists. One
/// per remote server, shared by its instances and filled by the router.
#[derive(Debug, Default)]
pub struct ToolHeaders {
    by_tool: RwLock<HashMap<String, Vec<Mirror>>>,
}

/// One mirrored argument: its path of `properties` keys, and the header's name after `Mcp-Param-`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mirror {
    path: Vec<String>,
    token: String,
}

impl ToolHeaders {
    /// Learns the mirrored arguments of `tools` (a `tools/list` result's `tools`); a tool that
    /// mirrors none is forgotten, so a changed schema takes effect.
    pub fn learn(&self, tools: &[Value]) {
        let mut by_tool = self.by_tool.write().expect("lock");
        for t in tools {
            let Some(name) = t.get("name").and_then(Value::as_str) else { continue };
            let mut mirrors = Vec::new();
            let valid = t.get("inputSchema").is_none_or(|s| collect(s, &mut Vec::new(), &mut mirrors));
            // A schema with an invalid annotation is one a client drops the tool for: nothing
            // is mirrored (the server will say what it makes of the call).
            if !valid || mirrors.is_empty() {
                by_tool.remove(name);
            } else {
                by_tool.insert(name.to_string(), mirrors);
            }
        }
    }

    /// The `Mcp-Param-*` headers of a call of `tool` with `arguments`: names and raw values (the
    /// transport encodes them). An argument that is absent, null or not a scalar gets none.
    pub fn for_call(&self, tool: &str, arguments: &Value) -> Vec<(String, String)> {
        let by_tool = self.by_tool.read().expect("lock");
        let Some(mirrors) = by_tool.get(tool) else { return Vec::new() };
        mirrors
            .iter()
            .filter_map(|m| {
                let value = m.path.iter().try_fold(arguments, |node, key| node.get(key))?;
                let text = match value {
                    Value::String(s) => s.clone(),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => n.to_string(),
                    _ => return None,
                };
                Some((format!("Mcp-Param-{}", m.token), text))
            })
            .collect()
    }

    /// Whether any tool mirrors an argument (else a call needs no look at its arguments).
    pub fn is_empty(&self) -> bool {
        self.by_tool.read().expect("lock").is_empty()
    }
}

/// The annotated properties under `schema`, reached by `properties` keys (where the spec
/// allows the annotation). False when one is invalid: not a header name, on a type a header may
/// not mirror, or a name used twice (compared without case).
fn collect(schema: &Value, path: &mut Vec<String>, into: &mut Vec<Mirror>) -> bool {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else { return true };
    for (key, sub) in props {
        path.push(key.clone());
        if let Some(token) = sub.get("x-mcp-header") {
            let kind = sub.get("type").and_then(Value::as_str);
            let Some(token) = token.as_str().filter(|t| is_token(t)) else { return false };
            if !kind.is_some_and(|k| MIRRORED_TYPES.contains(&k))
                || into.iter().any(|m| m.token.eq_ignore_ascii_case(token))
            {
                return false;
            }
            into.push(Mirror { path: path.clone(), token: token.to_string() });
        }
        if !collect(sub, path, into) {
            return false;
        }
        path.pop();
    }
    true
}

/// An HTTP field-name token (RFC 9110).
fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tool(name: &str, schema: Value) -> Value {
        json!({"name": name, "inputSchema": schema})
    }

    #[test]
    fn annotated_scalars_are_mirrored_by_their_path() {
        let h = ToolHeaders::default();
        h.learn(&[tool(
            "deploy",
            json!({"type": "object", "properties": {
                "region": {"type": "string", "x-mcp-header": "Region"},
                "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
                "count": {"type": "integer", "x-mcp-header": "Count"},
                "note": {"type": "string"},
                "target": {"type": "object", "properties": {"env": {"type": "string", "x-mcp-header": "Env"}}},
            }}),
        )]);
        let args = json!({"region": "eu-west", "dry": true, "count": 3, "note": "n", "target": {"env": "prod"}});
        let mut got = h.for_call("deploy", &args);
        got.sort();
        let want = [
            ("Mcp-Param-Count", "3"),
            ("Mcp-Param-Dry-Run", "true"),
            ("Mcp-Param-Env", "prod"),
            ("Mcp-Param-Region", "eu-west"),
        ];
        assert_eq!(got, want.map(|(a, b)| (a.to_string(), b.to_string())));
        // Absent or null arguments send no header; nor does a tool no list named.
        assert_eq!(h.for_call("deploy", &json!({"region": null})), Vec::<(String, String)>::new());
        assert_eq!(h.for_call("other", &args), Vec::<(String, String)>::new());
    }

    #[test]
    fn a_tool_with_an_invalid_annotation_mirrors_nothing() {
        let ok = json!({"type": "string", "x-mcp-header": "Region"});
        for (why, bad) in [
            ("a number", json!({"type": "number", "x-mcp-header": "Ratio"})),
            ("not a token", json!({"type": "string", "x-mcp-header": "has space"})),
            ("not a string", json!({"type": "string", "x-mcp-header": 7})),
            ("a name used twice", json!({"type": "string", "x-mcp-header": "REGION"})),
        ] {
            let h = ToolHeaders::default();
            h.learn(&[tool("t", json!({"properties": {"a": ok, "b": bad}}))]);
            assert!(h.is_empty(), "{why}");
        }
    }

    #[test]
    fn a_schema_that_drops_its_annotations_is_forgotten() {
        let h = ToolHeaders::default();
        let annotated = json!({"properties": {"q": {"type": "string", "x-mcp-header": "Q"}}});
        h.learn(&[tool("search", annotated)]);
        assert!(!h.is_empty());
        h.learn(&[tool("search", json!({"properties": {"q": {"type": "string"}}}))]);
        assert!(h.is_empty());
    }
}
