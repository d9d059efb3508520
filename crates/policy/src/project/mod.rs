//! Plugin projects in Rust, Python and JavaScript: `switchyard plugin new` writes one,
//! [`build`] turns it into a component with the language's own toolchain, [`recorded`] replays
//! recorded calls against it (`plugin test`), with [`hooked`] the params and results of calls
//! for a plugin's content hooks.
//!
//! Everything a project starts from (the WIT of the policy world new plugins are written
//! against, switchyard:policy@0.3.0; the templates and their recorded calls; the pinned tool
//! versions) is compiled into the binary; nothing is fetched.

pub mod build;
pub mod hooked;
pub mod recorded;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The contract every new project targets (switchyard:policy@0.3.0), copied into
/// `wit/policy.wit`. A project of 0.1 or 0.2 keeps its own copy and builds as it did.
pub const POLICY_WIT: &str = include_str!("../../../../wit/0.3/policy.wit");

/// The versions `plugin new` pins and the tests build with. Change them together with the
/// interop tests' lock file (tests/plugin-langs), which is where they are proven to work.
pub const WIT_BINDGEN_VERSION: &str = "0.61.1";
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
pub const JCO_VERSION: &str = "1.24.6";
pub const COMPONENTIZE_JS_VERSION: &str = "0.21.0";

/// The templates, each with the example rule [`CALLS_JSONL`] expects: the same files the
/// repository builds and tests as examples.
const RUST_LIB: &str = include_str!("../../../../examples/plugins/template/src/lib.rs");
const PYTHON_APP: &str = include_str!("../../../../examples/plugins/python/template/app.py");
const JS_POLICY: &str = include_str!("../../../../examples/plugins/js/template/policy.js");
/// How the example template finds the WIT inside the repository, and in a project.
const RUST_WIT_PATH_IN_REPO: &str = r#"path: "../../../wit/0.3""#;
const RUST_WIT_PATH_IN_PROJECT: &str = r#"path: "wit""#;

/// The calls every new project replays, each with what the template's example rule answers:
/// `cursor` reads a file (passed on), tries to delete it (refused), `claude-code` deletes it
/// (run alone), and the delete tool listed to each of them (hidden from `cursor` only). An edit
/// to the rule changes at least one of these answers, and `plugin test` shows which. Then the
/// content hooks, which the template passes: the read's params, and its result (which holds a
/// made-up cloud key: a hook that redacts it fails this line and shows how).
const CALLS_JSONL: &str = r#"{"call": {"server": "files", "method": "tools/call", "tool": "read_file", "arguments": {"path": "/tmp/notes.txt"}, "annotations": {"readOnlyHint": true}, "client": {"name": "cursor", "version": "1.7.0", "transport": "socket"}, "era": "2025-11-25"}, "client": "session-1", "expect": {"verdict": "continue", "decision": {}}}
{"call": {"server": "files", "method": "tools/call", "tool": "delete_file", "arguments": {"path": "/tmp/notes.txt"}, "client": {"name": "cursor", "version": "1.7.0", "transport": "socket"}, "era": "2025-11-25"}, "client": "session-1", "expect": {"verdict": "reject", "reason": "cursor may not delete files here"}}
{"call": {"server": "files", "method": "tools/call", "tool": "delete_file", "arguments": {"path": "/tmp/notes.txt"}, "client": {"name": "claude-code", "version": "2.1.0", "transport": "stdio"}, "era": "2025-11-25"}, "client": "session-2", "expect": {"verdict": "continue", "decision": {"concurrency": "exclusive"}}}
{"tool": {"server": "files", "name": "delete_file", "annotations": {"destructiveHint": true}, "client": {"name": "cursor", "transport": "socket"}}, "expect": {"hidden": true}}
{"tool": {"server": "files", "name": "delete_file", "annotations": {"destructiveHint": true}, "client": {"name": "claude-code", "transport": "stdio"}}, "expect": {"hints": {"destructiveHint": true}}}
{"call": {"server": "files", "method": "tools/call", "tool": "read_file", "client": {"name": "cursor", "transport": "socket"}}, "params": {"name": "read_file", "arguments": {"path": "/tmp/notes.txt"}}, "expect": {"verdict": "continue"}}
{"call": {"server": "files", "method": "tools/call", "tool": "read_file", "client": {"name": "cursor", "transport": "socket"}}, "result": {"content": [{"type": "text", "text": "aws_access_key_id = AKIAIOSFODNN7EXAMPLE"}]}, "expect": {"verdict": "continue"}}
"#;

/// A language a plugin project can be written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Rust,
    Python,
    Js,
}

impl Lang {
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        }
    }

    /// The file whose presence says a directory is a project in this language (and which the
    /// user edits, for Python and JavaScript).
    pub fn marker(self) -> &'static str {
        match self {
            Lang::Rust => "Cargo.toml",
            Lang::Python => "app.py",
            Lang::Js => "policy.js",
        }
    }

    /// The language of the project in `dir`, told by its marker file.
    pub fn detect(dir: &Path) -> anyhow::Result<Lang> {
        let found: Vec<Lang> =
            [Lang::Rust, Lang::Python, Lang::Js].into_iter().filter(|l| dir.join(l.marker()).is_file()).collect();
        match found.as_slice() {
            [one] => Ok(*one),
            [] => bail!(
                "{} is not a plugin project: it has none of Cargo.toml (Rust), app.py (Python) or policy.js \
                 (JavaScript); create one with `switchyard plugin new NAME --lang rust|python|js`",
                dir.display()
            ),
            many => bail!(
                "{} holds more than one kind of plugin project ({}); keep one per directory",
                dir.display(),
                many.iter().map(|l| l.marker()).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// The plugin's name: the project directory's own name (also the name of the `.wasm`).
pub fn project_name(dir: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    let abs = abs.canonicalize().unwrap_or(abs);
    let name = abs.file_name().map(|n| n.to_string_lossy().into_owned());
    name.filter(|n| !n.is_empty())
        .with_context(|| format!("{} has no directory name to name the plugin by", dir.display()))
}

/// Where `plugin build` puts the component of the project in `dir`.
pub fn output_path(dir: &Path) -> anyhow::Result<PathBuf> {
    Ok(dir.join(format!("{}.wasm", project_name(dir)?)))
}

/// Writes a new project into the directory `path` (created; it must not hold anything yet),
/// named by its last component. Returns the files written.
pub fn new_project(path: &Path, lang: Lang) -> anyhow::Result<Vec<PathBuf>> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    check_name(&name)?;
    if path.exists() {
        let empty = path.is_dir() && std::fs::read_dir(path).map(|mut d| d.next().is_none()).unwrap_or(false);
        if !empty {
            bail!("{} exists already and is not an empty directory; choose a new name", path.display());
        }
    }
    let mut files: Vec<(&str, String)> = vec![
        ("wit/policy.wit", POLICY_WIT.to_string()),
        ("calls.jsonl", CALLS_JSONL.to_string()),
        ("README.md", readme(&name, lang)),
    ];
    match lang {
        Lang::Rust => {
            files.push(("Cargo.toml", cargo_toml(&name)));
            files.push(("src/lib.rs", rust_lib()?));
            files.push((".gitignore", format!("/target/\n/{name}.wasm\n")));
        }
        Lang::Python => {
            files.push(("app.py", PYTHON_APP.to_string()));
            files.push((".gitignore", format!("/.venv/\n__pycache__/\n/{name}.wasm\n")));
        }
        Lang::Js => {
            files.push(("policy.js", JS_POLICY.to_string()));
            files.push(("package.json", package_json(&name)));
            files.push((".gitignore", format!("/node_modules/\n/{name}.wasm\n")));
        }
    }
    let mut written = Vec::new();
    for (rel, text) in files {
        let file = path.join(rel);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
        written.push(file);
    }
    Ok(written)
}

/// A name every toolchain accepts as a package name and a file name.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !ok {
        bail!(
            "`{name}` cannot name a plugin: use lowercase letters, digits, `-` and `_`, starting with a letter \
             (it becomes the package name and the .wasm file name)"
        );
    }
    Ok(())
}

fn rust_lib() -> anyhow::Result<String> {
    if !RUST_LIB.contains(RUST_WIT_PATH_IN_REPO) {
        bail!("internal: the Rust template no longer names its WIT as {RUST_WIT_PATH_IN_REPO}");
    }
    Ok(RUST_LIB.replace(RUST_WIT_PATH_IN_REPO, RUST_WIT_PATH_IN_PROJECT))
}

fn cargo_toml(name: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
# The guest-side bindings of wit/policy.wit; the host runs plugins synchronously, so no async.
wit-bindgen = {{ version = "{WIT_BINDGEN_VERSION}", default-features = false, features = ["macros", "realloc"] }}

[profile.release]
# Small components load faster and are cheaper to keep warm.
opt-level = "s"
lto = true
codegen-units = 1
strip = true
panic = "abort"

# A workspace of its own, so the project builds inside another workspace's directory too.
[workspace]
"#
    )
}

fn package_json(name: &str) -> String {
    format!(
        r#"{{
  "name": "{name}",
  "private": true,
  "type": "module",
  "description": "A switchyard policy plugin; `switchyard plugin build` componentizes policy.js",
  "devDependencies": {{
    "@bytecodealliance/componentize-js": "{COMPONENTIZE_JS_VERSION}",
    "@bytecodealliance/jco": "{JCO_VERSION}"
  }}
}}
"#
    )
}

/// What to run once so that `plugin build` finds the language's toolchain.
pub fn install_hint(lang: Lang) -> String {
    match lang {
        Lang::Rust => "rustup target add wasm32-wasip2".to_string(),
        Lang::Python => {
            format!("python3 -m venv .venv && .venv/bin/pip install componentize-py=={COMPONENTIZE_PY_VERSION}")
        }
        Lang::Js => "npm install".to_string(),
    }
}

fn readme(name: &str, lang: Lang) -> String {
    let (file, tool) = match lang {
        Lang::Rust => ("src/lib.rs", "Rust with the wasm32-wasip2 target".to_string()),
        Lang::Python => ("app.py", format!("componentize-py {COMPONENTIZE_PY_VERSION}")),
        Lang::Js => ("policy.js", format!("jco {JCO_VERSION} with componentize-js {COMPONENTIZE_JS_VERSION}")),
    };
    format!(
        "# {name}: a switchyard policy plugin in {lang}; edit {file} (the contract is wit/policy.wit, switchyard:policy@0.3.0)\n\
         Build: `switchyard plugin build .` writes {name}.wasm with {tool} (once: `{hint}`).\n\
         Test: `switchyard plugin test .` replays calls.jsonl (what the example rule answers; record what yours should) in the host; then copy {name}.wasm into the router's plugins/ directory and give it a [[plugins]] entry (`file = \"{name}.wasm\"`) in its config.\n",
        lang = lang.name(),
        hint = install_hint(lang),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_project_has_the_wit_the_plugin_the_readme_and_the_calls() {
        let dir = tempfile::tempdir().unwrap();
        for (lang, source) in [(Lang::Rust, "src/lib.rs"), (Lang::Python, "app.py"), (Lang::Js, "policy.js")] {
            let path = dir.path().join(format!("p-{}", lang.marker().replace('.', "-").to_lowercase()));
            new_project(&path, lang).unwrap();
            let wit = std::fs::read_to_string(path.join("wit/policy.wit")).unwrap();
            assert!(wit.contains("package switchyard:policy@0.3.0;"), "{lang:?}: a new project is of 0.3");
            assert_eq!(std::fs::read_to_string(path.join("README.md")).unwrap().lines().count(), 3);
            assert!(path.join(source).is_file(), "{lang:?}");
            assert_eq!(Lang::detect(&path).unwrap(), lang);
            let (mut with_caller, mut listed_to, mut hooks) = (0, Vec::new(), Vec::new());
            for line in std::fs::read_to_string(path.join("calls.jsonl")).unwrap().lines() {
                match recorded::Case::parse(line).unwrap() {
                    recorded::Case::Decide { call, .. } => with_caller += usize::from(call.caller.name.is_some()),
                    recorded::Case::List { caller, .. } => listed_to.extend(caller.name.as_deref().map(str::to_string)),
                    recorded::Case::Hook(h) => hooks.push(h.label()),
                }
            }
            assert_eq!(with_caller, 3, "{lang:?}: the calls say who called");
            assert_eq!(listed_to, ["cursor", "claude-code"], "{lang:?}: a tool is listed to two clients");
            assert_eq!(
                hooks,
                ["on-request tools/call read_file", "on-result tools/call read_file"],
                "{lang:?}: a call's params and result are replayed"
            );
        }
        let lib = std::fs::read_to_string(dir.path().join("p-cargo-toml/src/lib.rs")).unwrap();
        assert!(lib.contains(r#"generate!({ path: "wit", world: "policy" })"#), "{lib}");
    }

    /// The recorded calls are of the template's own rule: the Rust template (built as the
    /// example `template.wasm`) matches them all, and a plugin that passes everything does not.
    #[test]
    fn the_recorded_calls_hold_the_template_to_its_example_rule() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("rule");
        new_project(&project, Lang::Rust).unwrap();
        let calls = project.join("calls.jsonl");
        let example = |name: &str| Path::new(env!("SWITCHYARD_EXAMPLE_PLUGINS")).join(name);
        let opts = recorded::Options::default();
        let r = recorded::replay(&example("template.wasm"), &calls, &opts);
        assert!(r.result.is_ok() && r.text.contains("7 of 7 recorded calls match"), "{}", r.text);
        // `hints` with no tools configured changes nothing: every line of the rule fails.
        let passing = recorded::Options { config_json: Some(r#"{"tools": {}}"#), ..opts };
        let r = recorded::replay(&example("hints.wasm"), &calls, &passing);
        assert!(r.result.is_err(), "{}", r.text);
        for line in
            ["line 2: decide tools/call delete_file", "line 3: decide tools/call", "line 4: list-tool delete_file"]
        {
            assert!(r.text.contains(&format!("FAIL  {line}")), "{line}:\n{}", r.text);
        }
        assert!(r.text.contains("4 of 7 recorded calls match"), "{}", r.text);
    }

    /// The hook lines are replayed in the host: a plugin that redacts the recorded result fails
    /// that line with a diff of what it made of it; one whose interest leaves the call out is
    /// not asked, and passes.
    #[test]
    fn recorded_results_hold_a_plugin_to_what_it_makes_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("hooks");
        new_project(&project, Lang::Rust).unwrap();
        let calls = project.join("calls.jsonl");
        let example = |name: &str| Path::new(env!("SWITCHYARD_EXAMPLE_PLUGINS")).join(name);
        let r = recorded::replay(&example("redact.wasm"), &calls, &recorded::Options::default());
        assert!(r.result.is_err(), "{}", r.text);
        assert!(r.text.contains("ok    line 6: on-request tools/call read_file"), "{}", r.text);
        assert!(r.text.contains("FAIL  line 7: on-result tools/call read_file"), "{}", r.text);
        assert!(r.text.contains(r#"+  "verdict": "modify""#), "{}", r.text);
        assert!(r.text.contains("aws_access_key_id = [redacted: aws-access-key]"), "{}", r.text);
        // The same plugin, told to read another tool's results only, passes the line untouched.
        let elsewhere = recorded::Options { config_json: Some(r#"{"tools": ["search_*"]}"#), ..Default::default() };
        let r = recorded::replay(&example("redact.wasm"), &calls, &elsewhere);
        assert!(r.text.contains("ok    line 7: on-result tools/call read_file"), "{}", r.text);
        // A recorded answer that says what the plugin does passes.
        let expected = project.join("redacted.jsonl");
        std::fs::write(
            &expected,
            r#"{"call": {"tool": "read_file"}, "result": {"content": [{"type": "text", "text": "key AKIAIOSFODNN7EXAMPLE"}]},
                "expect": {"verdict": "modify", "result": {"content": [{"type": "text", "text": "key [redacted: aws-access-key]"}]}}}"#
                .replace('\n', " "),
        )
        .unwrap();
        let r = recorded::replay(&example("redact.wasm"), &expected, &recorded::Options::default());
        assert!(r.result.is_ok() && r.text.contains("1 of 1 recorded calls match"), "{}", r.text);
    }

    #[test]
    fn a_project_is_never_written_over_files_or_under_a_bad_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine");
        new_project(&path, Lang::Python).unwrap();
        let e = new_project(&path, Lang::Python).unwrap_err().to_string();
        assert!(e.contains("exists already"), "{e}");
        let e = new_project(&dir.path().join("My Plugin"), Lang::Js).unwrap_err().to_string();
        assert!(e.contains("cannot name a plugin"), "{e}");
    }

    #[test]
    fn a_directory_without_a_project_says_how_to_make_one() {
        let dir = tempfile::tempdir().unwrap();
        let e = Lang::detect(dir.path()).unwrap_err().to_string();
        assert!(e.contains("switchyard plugin new"), "{e}");
    }
}
