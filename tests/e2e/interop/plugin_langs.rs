//! Plugins in Rust, Python and JavaScript, the way a user makes them: `plugin new`, an edit,
//! `plugin build` with the real toolchains (componentize-py and jco at the versions `plugin new`
//! pins, installed here under target/tmp/plugin-langs and reused by later runs), `plugin test`
//! against recorded calls, then the component dropped into a running router's plugins/.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use serde_json::json;

use crate::setup::*;
use switchyard_policy::project::{COMPONENTIZE_JS_VERSION, COMPONENTIZE_PY_VERSION, JCO_VERSION};
use switchyard_testkit::python_venv::make_venv;
use switchyard_testkit::setup_lock::setup_lock;
use switchyard_testkit::*;

fn langs_dir() -> PathBuf {
    crate::npm_setup::repo_root().join("tests/plugin-langs")
}

/// Where the toolchains and the Rust builds are kept between runs.
fn cache() -> PathBuf {
    target_tmp().join("plugin-langs")
}

/// Installs `what` with `install` unless `stamp` already records `key` (the pinned versions).
/// Under the tests' setup lock ([`setup_lock`]), as the npm and Python fixtures are: a run
/// holds it shared while it uses the toolchains, and takes it alone only to install them, so
/// two runs at once never install into the same directory, nor one under the other's feet.
fn once(stamp: &Path, key: &str, what: &str, install: impl FnOnce() -> Result<(), String>) {
    let ready = || std::fs::read_to_string(stamp).is_ok_and(|k| k == key);
    setup_lock()
        .ensure(ready, || {
            let t = Instant::now();
            install()?;
            std::fs::write(stamp, key).map_err(|e| format!("write {}: {e}", stamp.display()))?;
            eprintln!("installed {what} in {:?}", t.elapsed());
            Ok(())
        })
        .unwrap_or_else(|e| panic!("install {what} under {}: {e}", stamp.parent().unwrap_or(stamp).display()));
}

/// A PATH with componentize-py (a virtualenv) and jco (npm ci of tests/plugin-langs) first.
fn toolchain_path() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = cache();
        std::fs::create_dir_all(&dir).unwrap();
        let requirements = std::fs::read_to_string(langs_dir().join("requirements.txt")).unwrap();
        assert!(
            requirements.contains(&format!("componentize-py=={COMPONENTIZE_PY_VERSION}")),
            "tests/plugin-langs/requirements.txt must pin the componentize-py that `plugin new` names"
        );
        let python = make_venv(&langs_dir().join("requirements.txt"), "plugin-langs/venv")
            .unwrap_or_else(|e| panic!("componentize-py cannot be installed: {e}"));
        let venv_bin = python.parent().expect("a virtualenv's bin").to_path_buf();
        let lock = std::fs::read_to_string(langs_dir().join("package-lock.json")).unwrap();
        let manifest = std::fs::read_to_string(langs_dir().join("package.json")).unwrap();
        for pin in [
            format!("\"@bytecodealliance/jco\": \"{JCO_VERSION}\""),
            format!("\"@bytecodealliance/componentize-js\": \"{COMPONENTIZE_JS_VERSION}\""),
        ] {
            assert!(manifest.contains(&pin), "tests/plugin-langs/package.json must pin what `plugin new` pins: {pin}");
        }
        let js = dir.join("js");
        once(&dir.join("js.stamp"), &lock, "jco and componentize-js", || {
            let _ = std::fs::remove_dir_all(&js);
            std::fs::create_dir_all(&js).map_err(|e| format!("create {}: {e}", js.display()))?;
            for f in ["package.json", "package-lock.json"] {
                std::fs::copy(langs_dir().join(f), js.join(f)).map_err(|e| format!("copy {f}: {e}"))?;
            }
            run_step(
                Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&js),
                &format!("`npm ci` of jco in {}", js.display()),
                " It needs the npm registry (or a mirror set in npm's config).",
            )
        });
        format!(
            "{}:{}:{}",
            venv_bin.display(),
            js.join("node_modules/.bin").display(),
            std::env::var("PATH").unwrap_or_default()
        )
    })
}

/// `switchyard plugin ARGS` with the toolchains on PATH; Rust builds share one target dir.
fn plugin(args: &[&str], path: &str) -> Output {
    Command::new(bin())
        .arg("plugin")
        .args(args)
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", cache().join("rust-target"))
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The client name the e2e client gives in its initialize (tests/support).
const E2E_CLIENT: &str = "switchyard-e2e";

/// Retargets the template's example rule, in `decide` and in `list-tool`, from `cursor` and
/// `delete_file` to the e2e client and the fixture's `write` tool: the edit a user makes first.
fn retarget_example_rule(source: &Path) {
    let text = std::fs::read_to_string(source).unwrap();
    let edited = text.replace("cursor", E2E_CLIENT).replace("delete_file", "write");
    assert!(
        edited.matches("\"write\"").count() + edited.matches("'write'").count() >= 3,
        "the template's example rule was not found in {}:\n{edited}",
        source.display()
    );
    std::fs::write(source, edited).unwrap();
}

/// Adds a rule of each kind where the Rust template says to: one sets a field of the decision,
/// one rewords a listed tool. Both compile only with the parameters named and `current`
/// mutable, as the template writes them.
fn add_rust_rules(source: &Path) {
    let text = std::fs::read_to_string(source).unwrap();
    let decide = "        Verdict::Continue(current)\n";
    let list = "        current\n    }\n\n    /// Which calls";
    assert!(text.contains(decide) && text.contains(list), "the template's ends changed:\n{text}");
    let edited = text
        .replace(decide, &format!("        if call.tool.as_deref() == Some(\"sleep\") {{\n            current.timeout_ms = Some(60_000);\n        }}\n{decide}"))
        .replace(list, &format!("        if tool.name == \"echo\" {{\n            current.description = Some(\"{ECHO_REWORDED}\".into());\n        }}\n{list}"));
    std::fs::write(source, edited).unwrap();
}

/// The description the rule [`add_rust_rules`] adds gives `echo`.
const ECHO_REWORDED: &str = "Says its text back (reworded by a rule)";

/// new -> build and test as written (a 0.3 plugin: `plugin test` asks its `list-tool` and its
/// content hooks; the recorded calls are the example rule's) -> retarget the example rule (Rust:
/// and add a rule of each kind) and uncomment the result hook's example -> build -> test (the
/// lines of the rule now fail, with a diff) -> dropped into a running router, whose client no
/// longer sees the tool the rule hides from it, is refused calling it, and reads results as the
/// hook changed them.
async fn template_round_trip(lang: &str, source: &str) {
    let path = toolchain_path();
    let work = temp_dir();
    let project = work.path().join(format!("probe-{lang}"));
    let project_arg = project.display().to_string();
    let out = plugin(&["new", &project_arg, "--lang", lang], path);
    assert!(out.status.success(), "{}", text(&out));
    let wit = std::fs::read_to_string(project.join("wit/policy.wit")).unwrap();
    assert!(wit.contains("package switchyard:policy@0.3.0;"), "{lang}: a new project is written against 0.3");

    // The default 5 ms per call is wall time: on a loaded CI machine even a Rust plugin's first
    // call can miss it. The deadline is not what this test is about.
    let toml = work.path().join("limits.toml");
    std::fs::write(&toml, format!("[[plugins]]\nfile = \"probe-{lang}.wasm\"\ndeadline_ms = 1000\n")).unwrap();
    let toml_arg = toml.display().to_string();

    // Out of the box: the project builds, and its recorded calls pass.
    let t = Instant::now();
    let out = plugin(&["build", &project_arg], path);
    assert!(out.status.success(), "{lang} build failed:\n{}", text(&out));
    let wasm = project.join(format!("probe-{lang}.wasm"));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), wasm.display().to_string());
    eprintln!("{lang}: built in {:?}, {} bytes", t.elapsed(), std::fs::metadata(&wasm).unwrap().len());
    let out = plugin(&["test", &project_arg, "--config-file", &toml_arg], path);
    assert!(out.status.success(), "{lang}, as written:\n{}", text(&out));
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(report.contains("7 of 7 recorded calls match"), "{report}");
    // `list-tool` names the line only when the plugin is of 0.2 or later (a 0.1 one is asked
    // `annotate`); the content hooks are asked the last two lines, and pass them.
    assert!(report.contains("ok    line 4: list-tool delete_file for cursor"), "{lang}: {report}");
    assert!(report.contains("ok    line 7: on-result tools/call read_file"), "{lang}: {report}");

    retarget_example_rule(&project.join(source));
    uncomment_result_example(&project.join(source), lang);
    if lang == "rust" {
        add_rust_rules(&project.join(source));
    }
    let out = plugin(&["build", &project_arg], path);
    assert!(out.status.success(), "{lang} build of the edit failed:\n{}", text(&out));
    if lang == "rust" {
        assert!(!text(&out).contains("warning"), "the edited template builds with warnings:\n{}", text(&out));
    }
    // The recorded calls are the rule's: each of its three answers about `delete_file` changed.
    let out = plugin(&["test", &project_arg, "--config-file", &toml_arg], path);
    assert!(!out.status.success(), "{lang}: the edit changed nothing plugin test sees:\n{}", text(&out));
    let report = text(&out);
    for line in [
        "FAIL  line 2: decide tools/call delete_file",
        "FAIL  line 3: decide tools/call delete_file",
        "FAIL  line 4: list-tool delete_file for cursor",
    ] {
        assert!(report.contains(line), "{lang}: no `{line}` in\n{report}");
    }
    assert!(report.contains("-  \"verdict\": \"reject\""), "{lang}: {report}");
    assert!(report.contains("4 of 7 recorded calls match"), "{lang}: {report}");

    // Interpreters need more than the default 5 ms on a loaded machine (docs/plugins.md).
    let cfg = format!("[[plugins]]\nfile = \"probe-{lang}.wasm\"\nrequired = false\ndeadline_ms = 1000\n");
    let mut s = Setup::with_config(&[], &[], Some(&cfg)).await;
    s.client.initialize().await;
    let staged = s.plugins_dir().join(".probe.tmp");
    std::fs::copy(&wasm, &staged).unwrap();
    std::fs::rename(&staged, s.plugins_dir().join(format!("probe-{lang}.wasm"))).unwrap();
    // Loading takes a compile when the cache lacks it: tens of seconds for an interpreter.
    let end = Instant::now() + std::time::Duration::from_secs(180);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match s.client.recv_timeout(left).await {
            Some(m) if m["method"] == "notifications/tools/list_changed" => break,
            Some(_) => {}
            None => panic!("{lang}: the plugin never took effect:\n{}", s.router.stderr.text()),
        }
    }
    let list = s.client.request("tools/list", json!({})).await;
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(!names.contains(&"write"), "{lang}: {names:?}\n{}", s.router.stderr.text());
    assert!(names.contains(&"read") && names.contains(&"echo"), "{lang}: {names:?}");
    if lang == "rust" {
        let echo = tools.iter().find(|t| t["name"] == "echo").unwrap();
        assert_eq!(echo["description"], ECHO_REWORDED, "the added rule did not run: {echo}");
    }
    let r = s.client.call_tool("write", json!({"path": "/a", "text": "hidden"})).await;
    let msg = refusal_text(&r);
    assert!(msg.contains(&format!("probe-{lang}.wasm")) && msg.contains(E2E_CLIENT), "{msg}");
    assert_eq!(s.client.call_text("echo", json!({"text": "through"})).await, "through");
    // The result hook's example, uncommented, changes what the client reads.
    let said = s.client.call_text("echo", json!({"text": "ask db.internal"})).await;
    assert_eq!(said, "ask [internal host]", "{lang}: the on-result example did not run");
}

/// Turns the template's commented `on_result` example into code: the lines after its
/// `An example: change what the model reads` (3 in Rust and JavaScript, 2 in Python), with the
/// parameter it reads named.
fn uncomment_result_example(source: &Path, lang: &str) {
    let text = std::fs::read_to_string(source).unwrap();
    let (prefix, count) = if lang == "python" { ("# ", 2) } else { ("// ", 3) };
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = lines.iter().position(|l| l.contains("An example: change what the model reads"));
    let at = at.unwrap_or_else(|| panic!("{lang}: the on-result example was not found in\n{text}"));
    for line in &mut lines[at + 1..=at + count] {
        *line = line.replacen(prefix, "", 1);
    }
    let mut edited = lines.join("\n") + "\n";
    if lang == "rust" {
        edited = edited
            .replace("fn on_result(_call: HookCall, _result: String)", "fn on_result(_call: HookCall, result: String)");
    }
    std::fs::write(source, edited).unwrap();
}

#[tokio::test]
async fn a_rust_plugin_goes_from_new_to_a_running_router() {
    template_round_trip("rust", "src/lib.rs").await;
}

#[tokio::test]
async fn a_python_plugin_goes_from_new_to_a_running_router() {
    template_round_trip("python", "app.py").await;
}

#[tokio::test]
async fn a_javascript_plugin_goes_from_new_to_a_running_router() {
    template_round_trip("js", "policy.js").await;
}

/// The Python and JavaScript `hints` examples (0.2): built from a new project with the example's
/// source, and held to the example's recorded calls with its config (the Rust `hints` is held to
/// the same calls in crates/policy).
#[test]
fn the_python_and_javascript_hints_examples_pass_their_recorded_calls() {
    let path = toolchain_path();
    let work = temp_dir();
    let examples = crate::npm_setup::repo_root().join("examples/plugins");
    for (lang, source) in [("python", "app.py"), ("js", "policy.js")] {
        let project = work.path().join(format!("hints-{lang}"));
        let project_arg = project.display().to_string();
        let out = plugin(&["new", &project_arg, "--lang", lang], path);
        assert!(out.status.success(), "{}", text(&out));
        let example = examples.join(lang).join("hints");
        std::fs::copy(example.join(source), project.join(source)).unwrap();
        // The example is of 0.2: a project keeps the contract it was written against.
        let wit_02 = crate::npm_setup::repo_root().join("wit/0.2/policy.wit");
        std::fs::copy(wit_02, project.join("wit/policy.wit")).unwrap();
        let out = plugin(&["build", &project_arg], path);
        assert!(out.status.success(), "{lang} hints build failed:\n{}", text(&out));
        let config = std::fs::read_to_string(example.join("config.json")).unwrap();
        let calls = example.join("calls.jsonl").display().to_string();
        // Interpreters need more than the default 5 ms on a loaded machine (docs/plugins.md).
        let toml = work.path().join(format!("{lang}.toml"));
        let entry =
            format!("[[plugins]]\nfile = \"hints-{lang}.wasm\"\ndeadline_ms = 1000\nconfig = '{}'\n", config.trim());
        std::fs::write(&toml, entry).unwrap();
        let toml_arg = toml.display().to_string();
        let out = plugin(&["test", &project_arg, "--calls", &calls, "--config-file", &toml_arg], path);
        assert!(out.status.success(), "{lang} hints:\n{}", text(&out));
        // Asked as a 0.2 plugin: its `list-tool`, for the client of each line.
        let report = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(report.contains("ok    line 8: list-tool prompt read for cursor"), "{lang}: {report}");
        assert!(report.contains("8 of 8 recorded calls match"), "{lang}: {report}");
        // A config the example does not understand is refused by its init, by name.
        let out = plugin(&["test", &project_arg, "--calls", &calls, "--config", r#"{"tool": {}}"#], path);
        assert!(text(&out).contains("unknown key `tool`"), "{lang}: {}", text(&out));
    }
}

/// Without the language's toolchain, `plugin build` says what to install and how, and
/// installs nothing.
#[test]
fn a_missing_toolchain_is_named_with_its_install_command() {
    let work = temp_dir();
    let bare = "/usr/bin:/bin";
    for (lang, says) in [
        ("python", format!("pip install componentize-py=={COMPONENTIZE_PY_VERSION}")),
        ("js", "npm install".to_string()),
    ] {
        let project = work.path().join(format!("bare-{lang}"));
        let project_arg = project.display().to_string();
        assert!(plugin(&["new", &project_arg, "--lang", lang], bare).status.success());
        let out = plugin(&["build", &project_arg], bare);
        assert!(!out.status.success());
        assert!(text(&out).contains(&says), "{lang}: {}", text(&out));
        assert!(!project.join(format!("bare-{lang}.wasm")).exists());
        assert!(!project.join(".venv").exists() && !project.join("node_modules").exists());
    }
}

/// A `jco` on PATH that says it is `version` and, asked for anything else, writes its arguments
/// to `ran` and fails as a mismatched jco does. Returns the directory to put first on PATH.
fn other_jco(dir: &Path, version: &str, ran: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo {version}; exit 0; fi\necho \"$@\" >> '{}'\n\
         echo 'Error: failed to get path metadata' >&2\nexit 1\n",
        ran.display()
    );
    let jco = bin.join("jco");
    std::fs::write(&jco, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&jco, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Issue 43: a JavaScript project built before `npm install`, with another jco on PATH (the
/// 1.35 that `npm i -g` gives), is not handed to it: the mismatch is named with the command
/// that installs the pinned jco. Once the project has its own jco, that one builds it, whatever
/// PATH holds; and one of another version than package.json pins is named too.
#[test]
fn a_jco_other_than_the_pinned_one_is_named_not_run() {
    let work = temp_dir();
    let ran = work.path().join("other-jco-ran");
    let other = other_jco(work.path(), "1.35.0", &ran);
    let path = format!("{}:/usr/bin:/bin", other.display());
    let project = work.path().join("pinned-js");
    let project_arg = project.display().to_string();
    assert!(plugin(&["new", &project_arg, "--lang", "js"], &path).status.success());

    let out = plugin(&["build", &project_arg], &path);
    assert!(!out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(!ran.exists(), "the jco on PATH was run: {}", std::fs::read_to_string(&ran).unwrap_or_default());
    assert!(!said.contains("path metadata"), "{said}");
    for part in ["the jco on PATH is 1.35.0", &format!("pins {JCO_VERSION}"), "run `npm install` in"] {
        assert!(said.contains(part), "no `{part}` in: {said}");
    }

    // The project's own jco (the pinned one, as `npm install` leaves it) is the one used.
    toolchain_path();
    let toolchain = cache().join("js/node_modules");
    std::os::unix::fs::symlink(&toolchain, project.join("node_modules")).unwrap();
    let out = plugin(&["build", &project_arg], &path);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!ran.exists(), "the jco on PATH was run: {}", std::fs::read_to_string(&ran).unwrap_or_default());
    assert!(project.join("pinned-js.wasm").is_file());

    // A package.json that pins another version than node_modules holds: named, not built.
    let manifest = project.join("package.json");
    let pinned = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, pinned.replace(&format!("\"{JCO_VERSION}\""), "\"1.35.0\"")).unwrap();
    let out = plugin(&["build", &project_arg], &path);
    assert!(!out.status.success(), "{}", text(&out));
    let said = text(&out);
    let holds = format!("node_modules holds jco {JCO_VERSION}, but package.json pins 1.35.0");
    assert!(said.contains(&holds) && said.contains("run `npm install` in"), "{said}");
}
