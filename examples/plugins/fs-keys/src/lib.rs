//! `fs-keys`: for filesystem-like servers, reads run in parallel and writes serialise per path.
//!
//! Reads become `shared`; writes become `keyed` by their normalised path arguments, so two
//! writes to one file wait for each other while everything else runs alongside. A write whose
//! paths cannot be found becomes `exclusive` (the safe choice). Other tools are left alone.
//!
//! Config (every key optional):
//! `{"writes": ["<glob>", ...], "reads": ["<glob>", ...], "path_args": ["path", ...],
//!   "servers": ["<glob>", ...]}`. The defaults fit @modelcontextprotocol/server-filesystem
//! and Desktop Commander.

wit_bindgen::generate!({ path: "../../../wit/0.2", world: "policy" });

use std::cell::RefCell;

use plugin_util::{GlobList, parse_config};
use serde_json::Value;

const DEFAULT_WRITES: &[&str] = &[
    "write_file",
    "edit_file",
    "move_file",
    "create_directory",
    // Desktop Commander
    "edit_block",
    "write_pdf",
];
const DEFAULT_READS: &[&str] =
    &["read_*", "list_*", "directory_tree", "search_files", "get_file_info", "list_allowed_directories"];
const DEFAULT_PATH_ARGS: &[&str] =
    &["path", "paths", "source", "destination", "file_path", "directory", "old_path", "new_path"];

struct Rules {
    writes: GlobList,
    reads: GlobList,
    path_args: Vec<String>,
    servers: GlobList,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            writes: GlobList::new(DEFAULT_WRITES.iter().copied()),
            reads: GlobList::new(DEFAULT_READS.iter().copied()),
            path_args: DEFAULT_PATH_ARGS.iter().map(|s| s.to_string()).collect(),
            servers: GlobList::new(["*"]),
        }
    }
}

thread_local! {
    static RULES: RefCell<Rules> = RefCell::new(Rules::default());
}

/// Lexical normalisation, so `a/./b`, `a//b/` and `a/x/../b` key the same file. Symlinks are
/// not resolved: the plugin has no filesystem, and the server may see a different one.
fn normalise(path: &str) -> String {
    let path = path.replace('\\', "/");
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !absolute {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

fn collect_paths(args: &Value, names: &[String]) -> Vec<String> {
    let mut keys = Vec::new();
    let Some(obj) = args.as_object() else { return keys };
    for name in names {
        match obj.get(name) {
            Some(Value::String(s)) => keys.push(normalise(s)),
            Some(Value::Array(items)) => {
                keys.extend(items.iter().filter_map(Value::as_str).map(normalise));
            }
            _ => {}
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

struct FsKeys;

impl Guest for FsKeys {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        let mut rules = Rules::default();
        for (k, v) in &config {
            match k.as_str() {
                "writes" => rules.writes = GlobList::from_json(v, k)?,
                "reads" => rules.reads = GlobList::from_json(v, k)?,
                "servers" => rules.servers = GlobList::from_json(v, k)?,
                "path_args" => {
                    let list = v.as_array().ok_or("`path_args` must be an array of names")?;
                    rules.path_args = list
                        .iter()
                        .map(|n| n.as_str().map(str::to_string).ok_or("`path_args` must contain strings"))
                        .collect::<Result<_, _>>()?;
                }
                other => return Err(format!("unknown key `{other}`")),
            }
        }
        RULES.with(|r| *r.borrow_mut() = rules);
        Ok(())
    }

    fn decide(call: Call, mut current: Decision) -> Verdict {
        let Some(tool) = call.tool.as_deref() else { return Verdict::Continue(current) };
        RULES.with(|r| {
            let r = r.borrow();
            if !r.servers.matches(&call.server) {
                return;
            }
            // Writes are checked first: a tool in both lists is treated as the riskier kind.
            if r.writes.matches(tool) {
                let args = call
                    .arguments
                    .as_deref()
                    .and_then(|a| serde_json::from_str::<Value>(a).ok())
                    .unwrap_or(Value::Null);
                let keys = collect_paths(&args, &r.path_args);
                current.concurrency =
                    Some(if keys.is_empty() { Concurrency::Exclusive } else { Concurrency::Keyed(keys) });
            } else if r.reads.matches(tool) {
                current.concurrency = Some(Concurrency::Shared);
            }
        });
        Verdict::Continue(current)
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }
}

export!(FsKeys);

#[cfg(test)]
mod tests {
    use super::normalise;

    #[test]
    fn paths_normalise() {
        assert_eq!(normalise("/a/./b//c/"), "/a/b/c");
        assert_eq!(normalise("/a/x/../b"), "/a/b");
        assert_eq!(normalise("/../a"), "/a");
        assert_eq!(normalise("a/../../b"), "../b");
        assert_eq!(normalise("C:\\x\\y"), "C:/x/y");
        assert_eq!(normalise("./"), ".");
    }
}
