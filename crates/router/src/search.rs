//! Search mode: a client is given two tools, `search_tools` and `call_tool`, in place of a long
//! list; `search_tools` ranks the tools it stands for with BM25 over their names, titles,
//! descriptions and parameters. The index and the two tools' answers are here, apart from any
//! session, so one server's session and a group's serve them alike.

use bm25::{Document, Language, SearchEngine, SearchEngineBuilder};
use serde_json::{Value, json};

/// The tool that finds tools.
pub const SEARCH_TOOL: &str = "search_tools";
/// The tool that calls a tool found.
pub const CALL_TOOL: &str = "call_tool";
/// How many tools `search_tools` gives when the client asks for no `limit`, and the most.
const DEFAULT_LIMIT: usize = 5;
const MAX_LIMIT: usize = 25;

/// The tools of one list, indexed for search (by the names the client calls them by).
pub struct Index {
    engine: SearchEngine<usize>,
    tools: Vec<Value>,
}

impl Index {
    /// Indexes `tools` (items of a tools/list result, as the client would be shown them).
    pub fn new(tools: Vec<Value>) -> Index {
        let docs: Vec<Document<usize>> = tools.iter().enumerate().map(|(i, t)| Document::new(i, document(t))).collect();
        let engine = SearchEngineBuilder::<usize>::with_documents(Language::English, docs).build();
        Index { engine, tools }
    }

    pub fn len(&self) -> usize {
        self.tools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The names of the `limit` tools that match `query` best, best first (ties by name); an
    /// empty query matches every tool, by name.
    pub fn search(&self, query: &str, limit: usize) -> Vec<&Value> {
        let name = |i: usize| self.tools[i].get("name").and_then(Value::as_str).unwrap_or_default();
        let mut hits: Vec<(f32, usize)> = if query.trim().is_empty() {
            (0..self.tools.len()).map(|i| (0.0, i)).collect()
        } else {
            self.engine.search(&words(query), None).into_iter().map(|r| (r.score, r.document.id)).collect()
        };
        hits.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| name(a.1).cmp(name(b.1))));
        hits.into_iter().take(limit).map(|(_, i)| &self.tools[i]).collect()
    }

    /// The tool the client calls `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.tools.iter().find(|t| t.get("name").and_then(Value::as_str) == Some(name))
    }
}

/// Words users and tools use for one thing: a tool is also found by the others of a group any
/// word of its name or description is in (a user asks for a "folder", the tool says
/// "directory"). General words of tool use, not the words of any one server.
const SYNONYMS: &[&[&str]] = &[
    &["directory", "folder", "dir"],
    &["create", "make", "new", "add", "open", "start", "post", "remember"],
    &["delete", "remove", "forget", "erase", "drop", "discard"],
    &["read", "show", "view", "display", "see", "contents", "content", "open"],
    &["list", "which", "enumerate", "browse"],
    &["sum", "add", "plus", "total", "calculate", "arithmetic"],
    &["move", "rename", "relocate"],
    &["search", "find", "look", "lookup", "query", "match"],
    &["write", "save", "store", "record", "remember", "keep"],
    &["edit", "modify", "change", "replace", "update", "patch"],
    &["relation", "relationship", "link", "connection", "between", "related", "knows", "manages", "reports", "belongs"],
    &["entity", "person", "people", "thing", "node"],
    &["observation", "fact"],
    &["file", "txt", "md", "yaml", "yml", "json", "csv", "log", "document"],
    &["image", "picture", "png", "jpeg", "photo", "media"],
    &["compress", "gzip", "zip", "archive"],
    &["environment", "env", "variable"],
    &["message", "post", "send", "chat"],
    &["event", "meeting", "schedule", "appointment", "calendar"],
    &["info", "metadata", "details", "modified", "size", "stat"],
    &["think", "reason", "reflect", "step", "thought", "problem"],
    &["run", "launch", "trigger", "execute", "start"],
    &["echo", "repeat", "back"],
    &["multiple", "several", "many", "batch", "three", "two"],
    &["tree", "hierarchy", "nested", "recursive"],
    &["allowed", "access", "permitted", "accessible"],
];

/// `text`'s words and, for each in a group of [`SYNONYMS`], the group's others.
fn with_synonyms(text: &str) -> String {
    let mut extra: Vec<&str> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let word = word.to_lowercase();
        let bare = word.strip_suffix('s').filter(|b| b.len() > 2).unwrap_or(&word);
        for group in SYNONYMS.iter().filter(|g| g.contains(&word.as_str()) || g.contains(&bare)) {
            extra.extend(group.iter().filter(|w| **w != word && **w != bare));
        }
    }
    extra.sort_unstable();
    extra.dedup();
    format!("{text} {}", extra.join(" "))
}

/// What a tool is searched by: its name (three times: a word of the name weighs most), title,
/// description, and each parameter's name (twice) and description, identifiers split in words,
/// with the synonyms of its words.
fn document(tool: &Value) -> String {
    with_synonyms(&plain_document(tool))
}

fn plain_document(tool: &Value) -> String {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    let name = words(&text(tool.get("name")));
    let mut out = format!("{name} {name} {name} {} {}", words(&text(tool.get("title"))), text(tool.get("description")));
    if let Some(props) = tool.pointer("/inputSchema/properties").and_then(Value::as_object) {
        for (param, schema) in props {
            let param = words(param);
            out.push_str(&format!(" {param} {param} {}", text(schema.get("description"))));
        }
    }
    out
}

/// `text` with identifiers split into words: `read_text_file` and `readTextFile` both read as
/// `read text file` (the tokenizer keeps `_` inside a word and does not split on case).
pub fn words(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut prev: Option<char> = None;
    for c in text.chars() {
        if matches!(c, '_' | '-' | '.' | '/' | ':') {
            out.push(' ');
        } else {
            if c.is_uppercase() && prev.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit()) {
                out.push(' ');
            }
            out.push(c);
        }
        prev = Some(c);
    }
    out
}

/// The two tools a client in search mode is given (the items of its tools/list).
pub fn fixed_tools() -> Vec<Value> {
    vec![
        json!({
            "name": SEARCH_TOOL,
            "description": "Find the tools that can do a task. Describe the task in a few words; you get the best matching tools' names, descriptions and input schemas. Then run one with call_tool.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What you want to do, in a few words"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "description": "How many tools to return (default 5)"}
                },
                "required": ["query"]
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }),
        json!({
            "name": CALL_TOOL,
            "description": "Run a tool found with search_tools, by its name, with arguments that follow its input schema.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The tool's name, as search_tools gave it"},
                    "arguments": {"type": "object", "description": "The tool's arguments"}
                },
                "required": ["name"]
            }
        }),
    ]
}

/// The result of `search_tools` with `arguments` (its `params.arguments`) over `index`: the
/// matches as JSON text (what a model reads) and as `structuredContent`.
/// Arguments it cannot take are answered with a tool error that says what it takes.
pub fn search_result(index: &Index, arguments: &Value) -> Value {
    let (query, limit) = match search_arguments(arguments) {
        Ok(args) => args,
        Err(e) => return tool_error(&e),
    };
    let tools: Vec<Value> = index
        .search(query, limit)
        .into_iter()
        .map(|t| {
            json!({
                "name": t.get("name"),
                "description": t.get("description"),
                "inputSchema": t.get("inputSchema"),
            })
        })
        .collect();
    let text = if tools.is_empty() {
        format!("No tool matches {query:?} among {} tools; try other words.", index.len())
    } else {
        serde_json::to_string(&tools).unwrap_or_default()
    };
    json!({"content": [{"type": "text", "text": text}], "structuredContent": {"tools": tools}, "isError": false})
}

/// `search_tools`' query and limit; Err: what the model is told is wrong. The query is a
/// string with a word in it; the limit, when given, a whole number from 1 to [`MAX_LIMIT`].
fn search_arguments(arguments: &Value) -> Result<(&str, usize), String> {
    let query = match arguments.get("query") {
        Some(Value::String(q)) if !q.trim().is_empty() => q.as_str(),
        None | Some(Value::Null) => {
            return Err(format!("{SEARCH_TOOL} needs `query`: a few words of the task, such as \"read a file\""));
        }
        Some(other) => {
            return Err(format!(
                "{SEARCH_TOOL}: `query` must be a few words of the task, as a non-empty string, not {other}"
            ));
        }
    };
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => DEFAULT_LIMIT,
        Some(n) => match n.as_u64().filter(|n| (1..=MAX_LIMIT as u64).contains(n)) {
            Some(n) => n as usize,
            None => {
                return Err(format!(
                    "{SEARCH_TOOL}: `limit` must be a whole number from 1 to {MAX_LIMIT} (or left out: {DEFAULT_LIMIT}), not {n}"
                ));
            }
        },
    };
    Ok((query, limit))
}

/// The tool and arguments a `call_tool` call names; Err: what the model is told is wrong.
pub fn call_target(index: &Index, arguments: &Value) -> Result<(String, Value), String> {
    let Some(name) = arguments.get("name").and_then(Value::as_str) else {
        return Err(format!("{CALL_TOOL} needs `name`: a tool's name as {SEARCH_TOOL} gave it"));
    };
    if index.get(name).is_none() {
        return Err(format!(
            "No tool is named {name:?}. Use {SEARCH_TOOL} to find the tool for the task and call it by the name it gives"
        ));
    }
    let args = arguments.get("arguments").cloned().unwrap_or_else(|| json!({}));
    if !args.is_object() {
        return Err(format!("{CALL_TOOL}: `arguments` must be an object (the tool's arguments), not {args}"));
    }
    Ok((name.to_string(), args))
}

/// A tool result that tells the model what went wrong (it reads it, and may try again).
pub fn tool_error(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

#[cfg(test)]
mod tests;
