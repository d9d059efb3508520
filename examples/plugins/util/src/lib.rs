//! Helpers shared by the example plugins: a tiny glob matcher, rule tables keyed by globs, and
//! the text of a result ([`content`]).

pub mod content;

use serde_json::Value;

/// Matches `text` against `pattern`, where `*` is any run of characters (also empty) and `?`
/// is exactly one character. Everything else matches itself.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Greedy two-pointer match with backtracking to the last `*`: linear in practice, no
    // recursion, so a hostile pattern cannot blow the plugin's stack or CPU budget.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// How specific a pattern is: literal characters count, wildcards do not. An exact name beats
/// `read_*`, which beats `*`.
fn specificity(pattern: &str) -> usize {
    pattern.chars().filter(|&c| c != '*' && c != '?').count()
}

/// Rules keyed by glob, looked up by tool name: the most specific matching pattern wins, ties
/// go to the pattern that sorts first (JSON object order is not kept, so order cannot decide).
#[derive(Debug, Default)]
pub struct GlobMap<T> {
    rules: Vec<(String, T)>,
}

impl<T> GlobMap<T> {
    pub fn new() -> Self {
        GlobMap { rules: Vec::new() }
    }

    pub fn insert(&mut self, pattern: impl Into<String>, value: T) {
        self.rules.push((pattern.into(), value));
        self.rules.sort_by(|a, b| specificity(&b.0).cmp(&specificity(&a.0)).then_with(|| a.0.cmp(&b.0)));
    }

    pub fn get(&self, name: &str) -> Option<&T> {
        self.rules.iter().find(|(p, _)| glob_match(p, name)).map(|(_, v)| v)
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

/// A list of globs, e.g. `["delete_*", "rm"]`.
#[derive(Debug, Default, Clone)]
pub struct GlobList {
    patterns: Vec<String>,
}

impl GlobList {
    pub fn new<S: Into<String>>(patterns: impl IntoIterator<Item = S>) -> Self {
        GlobList { patterns: patterns.into_iter().map(Into::into).collect() }
    }

    /// Reads a JSON array of strings; anything else is a configuration error.
    pub fn from_json(v: &Value, what: &str) -> Result<Self, String> {
        let arr = v.as_array().ok_or_else(|| format!("`{what}` must be an array of globs"))?;
        let mut patterns = Vec::with_capacity(arr.len());
        for p in arr {
            let s = p.as_str().ok_or_else(|| format!("`{what}` must contain strings only"))?;
            patterns.push(s.to_string());
        }
        Ok(GlobList { patterns })
    }

    pub fn matches(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| glob_match(p, name))
    }
}

/// `methods` and `tools` of a content plugin's config: the method and tool globs of its
/// interest (`methods` defaults to `default_methods`; `tools` to none, which means every tool).
pub fn interest_globs(
    config: &serde_json::Map<String, Value>,
    default_methods: &[&str],
) -> Result<(Vec<String>, Vec<String>), String> {
    let list = |key: &str| -> Result<Option<Vec<String>>, String> {
        let Some(v) = config.get(key) else { return Ok(None) };
        Ok(Some(GlobList::from_json(v, key)?.patterns))
    };
    let methods = list("methods")?.unwrap_or_else(|| default_methods.iter().map(|m| m.to_string()).collect());
    if methods.is_empty() {
        return Err("`methods` is empty, so the plugin would see no call; leave it out for the default".into());
    }
    Ok((methods, list("tools")?.unwrap_or_default()))
}

/// Parses the config handed to `init`, which must be a JSON object.
pub fn parse_config(config: &str) -> Result<serde_json::Map<String, Value>, String> {
    match serde_json::from_str::<Value>(config) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("config must be a JSON object".to_string()),
        Err(e) => Err(format!("config is not valid JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("read_*", "read_file"));
        assert!(!glob_match("read_*", "write_file"));
        assert!(glob_match("?_x", "a_x"));
        assert!(!glob_match("?_x", "_x"));
        assert!(glob_match("*file*", "write_file_now"));
        assert!(glob_match("a*b*c", "aXbYbZc"));
        assert!(!glob_match("a*b*c", "aXbYbZ"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    #[test]
    fn interest_globs_default_and_are_checked() {
        let cfg = |v: Value| v.as_object().unwrap().clone();
        let (m, t) = interest_globs(&cfg(serde_json::json!({})), &["tools/call"]).unwrap();
        assert_eq!((m, t), (vec!["tools/call".to_string()], vec![]));
        let (m, t) =
            interest_globs(&cfg(serde_json::json!({"methods": ["resources/*"], "tools": ["read_*"]})), &[]).unwrap();
        assert_eq!((m, t), (vec!["resources/*".to_string()], vec!["read_*".to_string()]));
        assert!(interest_globs(&cfg(serde_json::json!({"tools": "x"})), &["m"]).unwrap_err().contains("`tools`"));
        assert!(interest_globs(&cfg(serde_json::json!({"methods": []})), &[]).unwrap_err().contains("empty"));
    }

    #[test]
    fn most_specific_rule_wins() {
        let mut m = GlobMap::new();
        m.insert("*", 1);
        m.insert("read_file", 3);
        m.insert("read_*", 2);
        assert_eq!(m.get("read_file"), Some(&3));
        assert_eq!(m.get("read_dir"), Some(&2));
        assert_eq!(m.get("other"), Some(&1));
    }
}
