//! What `path-guard` checks: every argument that names a path must name one under a configured
//! root. Paths are resolved lexically (`.` and `..` taken out, relative paths joined to `base`)
//! and, where the plugin can see the filesystem, by the filesystem too: symbolic links are
//! followed (the nearest existing parent, for a path not made yet), so a link out of a root
//! is refused like a `..` out of it.

use std::path::{Component, Path, PathBuf};

use serde_json::{Map, Value};

/// The argument names read as paths when the config names none.
pub const DEFAULT_ARGUMENTS: &[&str] =
    &["path", "paths", "source", "destination", "file", "files", "file_path", "directory", "dir", "cwd"];

/// The config keys `Guard::from_config` reads.
pub const KEYS: &[&str] = &["roots", "arguments", "base"];

#[derive(Debug)]
pub struct Guard {
    /// The roots as configured (lexically clean), for messages and the lexical check.
    roots: Vec<PathBuf>,
    /// The roots as the filesystem resolves them, when the plugin can see them: then every
    /// path is resolved through the filesystem too. Empty: lexical checks only.
    real_roots: Vec<PathBuf>,
    arguments: Vec<String>,
    base: Option<PathBuf>,
}

/// How the plugin sees the filesystem, said once at init.
#[derive(Debug)]
pub enum Sight {
    /// Every root is visible: symbolic links are followed.
    Filesystem,
    /// No root is visible (a plugin has no filesystem unless the host opens one to it):
    /// paths are checked lexically, and any `..` is refused because a link before it could
    /// lead anywhere.
    Lexical,
}

impl Guard {
    pub fn from_config(config: &Map<String, Value>) -> Result<(Guard, Sight), String> {
        let roots = config.get("roots").ok_or("`roots` is required: the directories paths must stay under")?;
        let roots =
            roots.as_array().filter(|r| !r.is_empty()).ok_or("`roots` must be a non-empty array of absolute paths")?;
        let mut clean = Vec::new();
        for r in roots {
            let r = r.as_str().ok_or("`roots` must contain absolute paths (strings)")?;
            clean.push(absolute_root(r, "roots")?);
        }
        let base = match config.get("base") {
            None => None,
            Some(Value::String(b)) => Some(absolute_root(b, "base")?),
            Some(_) => return Err("`base` must be an absolute path (a string)".into()),
        };
        let arguments = match config.get("arguments") {
            None => DEFAULT_ARGUMENTS.iter().map(|a| a.to_string()).collect(),
            Some(v) => {
                let a = v
                    .as_array()
                    .filter(|a| !a.is_empty())
                    .ok_or("`arguments` must be a non-empty array of argument names")?;
                a.iter()
                    .map(|n| n.as_str().map(str::to_string).ok_or("`arguments` must contain names (strings)"))
                    .collect::<Result<_, _>>()?
            }
        };
        let real: Vec<PathBuf> = clean.iter().filter_map(|r| std::fs::canonicalize(r).ok()).collect();
        let (real_roots, sight) =
            if real.len() == clean.len() { (real, Sight::Filesystem) } else { (Vec::new(), Sight::Lexical) };
        Ok((Guard { roots: clean, real_roots, arguments, base }, sight))
    }

    /// Checks every path argument of `arguments` (a call's arguments, any depth); the reason
    /// for the first that is refused.
    pub fn check(&self, arguments: &Value) -> Result<(), String> {
        let mut found = Vec::new();
        self.collect(arguments, &mut found);
        for (name, path) in found {
            self.check_path(path).map_err(|why| format!("`{name}` = {path:?} {why}"))?;
        }
        Ok(())
    }

    fn collect<'a>(&self, v: &'a Value, found: &mut Vec<(&'a str, &'a str)>) {
        match v {
            Value::Object(o) => {
                for (k, v) in o {
                    if self.arguments.iter().any(|a| a == k) {
                        match v {
                            Value::String(s) => found.push((k, s)),
                            Value::Array(a) => {
                                found.extend(a.iter().filter_map(Value::as_str).map(|s| (k.as_str(), s)))
                            }
                            _ => {}
                        }
                    }
                    self.collect(v, found);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| self.collect(v, found)),
            _ => {}
        }
    }

    fn check_path(&self, raw: &str) -> Result<(), String> {
        let path = match raw.strip_prefix("file://") {
            Some(p) if p.contains('%') => return Err("is a file URI with %-escapes, which are refused".into()),
            // `file:///p` and `file://localhost/p` name the local `/p`; another host is not here.
            Some(p) => match p.split_once('/') {
                Some(("" | "localhost", _)) => &p[p.find('/').unwrap_or(0)..],
                _ => {
                    let host = p.split('/').next().unwrap_or(p);
                    return Err(format!(
                        "is a file URI on the host `{host}`; only local files are allowed: write `file:///PATH` or the path itself"
                    ));
                }
            },
            None => raw,
        };
        if path.starts_with('~') {
            return Err("starts with `~`; give the full path".into());
        }
        if is_windows_path(path) {
            return Err(format!(
                "is a Windows path, and path-guard reads paths the Unix way (`/` first); give the path under {} as the server \
                 takes it",
                self.list_roots()
            ));
        }
        let joined = match (Path::new(path).is_absolute(), &self.base) {
            (true, _) => PathBuf::from(path),
            (false, Some(base)) => base.join(path),
            (false, None) => {
                return Err(format!(
                    "is relative, and path-guard has no `base` directory to join it to; give an absolute path under {} \
                     (or set `base` in path-guard's config)",
                    self.list_roots()
                ));
            }
        };
        let (clean, dotdot) = lexical(&joined);
        if !self.roots.iter().any(|r| clean.starts_with(r)) {
            return Err(format!(
                "is outside the allowed roots ({}: `roots` in the config of path-guard's [[plugins]] entry)",
                self.list_roots()
            ));
        }
        if self.real_roots.is_empty() {
            if dotdot {
                return Err("has `..` in it, which is refused (write the path without it)".into());
            }
            return Ok(());
        }
        let real = resolve(&joined)?;
        if !self.real_roots.iter().any(|r| real.starts_with(r)) {
            return Err(format!(
                "leads outside the allowed roots through a symbolic link (to {}); {}",
                real.display(),
                self.list_roots()
            ));
        }
        Ok(())
    }

    fn list_roots(&self) -> String {
        self.roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
    }
}

fn absolute_root(r: &str, key: &str) -> Result<PathBuf, String> {
    let p = Path::new(r);
    if !p.is_absolute() {
        return Err(format!("`{key}`: {r:?} is not an absolute path"));
    }
    let (clean, dotdot) = lexical(p);
    if dotdot {
        return Err(format!("`{key}`: {r:?} has `..` in it; write the directory without it"));
    }
    Ok(clean)
}

/// `path` with `.` dropped and each `..` taking off the component before it (never above `/`),
/// and whether it had any `..`.
fn lexical(path: &Path) -> (PathBuf, bool) {
    let mut out = PathBuf::new();
    let mut dotdot = false;
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                dotdot = true;
                out.pop();
            }
            other => out.push(other),
        }
    }
    (out, dotdot)
}

/// Where the filesystem takes `path`: the nearest existing ancestor with its links followed,
/// and the rest (not there yet) after it. A `..` in the rest, or a link that leads nowhere, is
/// refused: neither can be resolved before the server acts on it.
fn resolve(path: &Path) -> Result<PathBuf, String> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
            // `..` or the root: nothing that exists is left to stand on.
            return Err("cannot be resolved (write the path without `..`)".into());
        };
        rest.push(name);
        existing.pop();
    }
    let mut real = std::fs::canonicalize(&existing)
        .map_err(|_| format!("goes through {}, a symbolic link that leads nowhere", existing.display()))?;
    for name in rest.iter().rev() {
        real.push(name);
    }
    Ok(real)
}

/// Whether `path` is written the Windows way: a drive (`C:`) or a `\\` share.
fn is_windows_path(path: &str) -> bool {
    let b = path.as_bytes();
    (b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':') || path.starts_with("\\\\")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn guard(config: Value) -> Guard {
        Guard::from_config(config.as_object().unwrap()).unwrap().0
    }

    fn refused(g: &Guard, args: Value) -> String {
        g.check(&args).expect_err(&format!("{args} should be refused"))
    }

    #[test]
    fn lexically_a_path_stays_under_a_root_or_is_refused() {
        // Roots that do not exist: the plugin cannot see them, so it checks lexically.
        let g = guard(json!({"roots": ["/no/such/work", "/no/such/data/"]}));
        for ok in [
            json!({"path": "/no/such/work"}),
            json!({"path": "/no/such/work/a/./b.txt"}),
            json!({"paths": ["/no/such/work/a", "/no/such/data/b"]}),
            json!({"source": "/no/such/work/x", "destination": "file:///no/such/data/y"}),
            json!({"content": "/etc/passwd", "mode": "/etc"}),
        ] {
            assert_eq!(g.check(&ok), Ok(()), "{ok}");
        }
        let e = refused(&g, json!({"path": "/etc/passwd"}));
        let roots = "(/no/such/work, /no/such/data: `roots` in the config of path-guard's [[plugins]] entry)";
        assert_eq!(e, format!(r#"`path` = "/etc/passwd" is outside the allowed roots {roots}"#));
        assert!(refused(&g, json!({"path": "/no/such/workshop"})).contains("outside"));
        assert!(refused(&g, json!({"path": "/no/such/work/../../etc"})).contains("outside"));
        assert!(refused(&g, json!({"path": "/no/such/work/a/../b"})).contains("`..`"), "no `..` without a filesystem");
        assert!(refused(&g, json!({"paths": ["/no/such/work/a", "/tmp"]})).contains("\"/tmp\""));
        assert!(refused(&g, json!({"edits": [{"file": "/tmp/x"}]})).contains("`file`"), "nested arguments count");
        let e = refused(&g, json!({"path": "notes.txt"}));
        assert!(e.contains("is relative, and path-guard has no `base` directory") && e.contains("set `base`"), "{e}");
        // A local file URI is its path; another host's, or a Windows path, is named for what it is.
        assert!(
            refused(&g, json!({"path": "file://localhost/etc/passwd"}))
                .contains(r#""file://localhost/etc/passwd" is outside the allowed roots"#)
        );
        assert_eq!(g.check(&json!({"path": "file://localhost/no/such/work/a"})), Ok(()));
        assert!(
            refused(&g, json!({"path": "file://fileserver/etc/passwd"}))
                .contains("is a file URI on the host `fileserver`")
        );
        let e = refused(&g, json!({"path": "C:\\Windows\\win.ini"}));
        assert!(e.contains("is a Windows path, and path-guard reads paths the Unix way"), "{e}");
        assert!(refused(&g, json!({"path": "\\\\server\\share\\x"})).contains("is a Windows path"));
        assert!(refused(&g, json!({"path": "~/x"})).contains("`~`"));
        assert!(refused(&g, json!({"path": "file:///no/such/work/%2e%2e/x"})).contains("%-escapes"));
    }

    #[test]
    fn relative_paths_resolve_against_base_and_names_are_configurable() {
        let g = guard(json!({"roots": ["/no/such/work"], "base": "/no/such/work/sub", "arguments": ["target"]}));
        assert_eq!(g.check(&json!({"target": "x/y", "path": "/etc"})), Ok(()), "`path` is not a path argument here");
        assert!(refused(&g, json!({"target": "../../../etc"})).contains("outside"));
    }

    #[cfg(unix)]
    #[test]
    fn symbolic_links_out_of_a_root_are_refused() {
        let dir = std::env::temp_dir().join(format!("path-guard-test-{}", std::process::id()));
        let (root, outside) = (dir.join("root"), dir.join("outside"));
        std::fs::create_dir_all(root.join("inner")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("inner"), root.join("in")).unwrap();
        std::os::unix::fs::symlink(dir.join("missing"), root.join("dangling")).unwrap();
        let (g, sight) = Guard::from_config(json!({"roots": [root]}).as_object().unwrap()).unwrap();
        assert!(matches!(sight, Sight::Filesystem));
        let at = |p: &str| json!({"path": root.join(p)});
        assert_eq!(g.check(&at("inner/new-file")), Ok(()), "a file not made yet, under a real directory");
        assert_eq!(g.check(&at("in/new-dir/new-file")), Ok(()), "a link that stays inside");
        assert_eq!(g.check(&at("inner/../inner/x")), Ok(()), "`..` that the filesystem resolves inside");
        let e = refused(&g, at("out/secret"));
        assert!(e.contains("through a symbolic link") && e.contains("outside"), "{e}");
        assert!(refused(&g, at("out")).contains("symbolic link"));
        assert!(refused(&g, at("in/../out/x")).contains("symbolic link"));
        assert!(refused(&g, at("dangling")).contains("leads nowhere"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_config_is_named() {
        for (config, says) in [
            (json!({}), "`roots` is required"),
            (json!({"roots": []}), "non-empty"),
            (json!({"roots": ["rel/dir"]}), "not an absolute path"),
            (json!({"roots": ["/a/../b"]}), "`..`"),
            (json!({"roots": ["/a"], "arguments": []}), "non-empty"),
            (json!({"roots": ["/a"], "base": 3}), "`base`"),
        ] {
            let e = Guard::from_config(config.as_object().unwrap()).unwrap_err();
            assert!(e.contains(says), "{config}: {e}");
        }
    }
}
