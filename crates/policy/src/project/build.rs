//! `switchyard plugin build`: one component from a plugin project, made by the language's own
//! toolchain (cargo, componentize-py, jco), then type-checked by the host.
//!
//! A missing tool is named with the command that installs it, and so is a jco of another
//! version than the project pins (it is not run); nothing is installed behind the user's back. The one exception the user asked for by choosing Rust is the wasm32-wasip2
//! target, which is added with rustup, saying so first.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use super::{COMPONENTIZE_JS_VERSION, COMPONENTIZE_PY_VERSION, JCO_VERSION, Lang, install_hint, output_path};

const WASM_TARGET: &str = "wasm32-wasip2";

/// Builds the project in `dir` into `dir/<name>.wasm` and checks that the host accepts it as a
/// policy plugin. Tool output goes to stderr; returns the component's path.
pub fn build(dir: &Path) -> anyhow::Result<PathBuf> {
    // Absolute: the tools run in the project's directory, and a tool found in it (.venv,
    // node_modules) is named by a path that must hold from there too.
    let dir = &std::path::absolute(dir).with_context(|| format!("cannot resolve {}", dir.display()))?;
    if !dir.is_dir() {
        bail!("{} is not a directory; give the plugin project's directory", dir.display());
    }
    let lang = Lang::detect(dir)?;
    if !dir.join("wit/policy.wit").is_file() {
        bail!(
            "{} has no wit/policy.wit (the contract the plugin is built against); \
             `switchyard plugin new` writes it, or copy wit/0.3/policy.wit of switchyard's repository there",
            dir.display()
        );
    }
    // Built beside the result and put in its place only once the host accepts it: a build that
    // fails leaves the last good plugin where it was.
    let out = output_path(dir)?;
    let fresh = out.with_extension("building.wasm");
    let built = build_checked(dir, lang, &fresh);
    if let Err(e) = built {
        let _ = std::fs::remove_file(&fresh);
        return Err(e);
    }
    std::fs::rename(&fresh, &out).with_context(|| format!("cannot move {} to {}", fresh.display(), out.display()))?;
    Ok(out)
}

/// Builds into `out` and checks that the host accepts it.
fn build_checked(dir: &Path, lang: Lang, out: &Path) -> anyhow::Result<()> {
    match lang {
        Lang::Rust => build_rust(dir, out)?,
        Lang::Python => build_python(dir, out)?,
        Lang::Js => build_js(dir, out)?,
    }
    let bytes = std::fs::read(out).with_context(|| {
        format!("the {} build said it succeeded, but {} cannot be read", lang.name(), out.display())
    })?;
    crate::wasm::type_check(&bytes).map_err(|e| {
        e.context(format!(
            "the build of {} is not a usable policy plugin (the last good one, if any, is kept)",
            dir.display()
        ))
    })
}

/// A progress line on stderr, written at once so it lands before the tool's own output.
fn say(line: &str) {
    switchyard_core::logging::say(line);
    switchyard_core::logging::flush();
}

/// Runs a build step with its output on our stderr (stdout carries only the result path).
fn run(cmd: &mut Command, what: &str) -> anyhow::Result<()> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let status = cmd
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .with_context(|| format!("cannot run {program} for {what}"))?;
    if !status.success() {
        bail!("{what} failed ({status}); the output of {program} above says why");
    }
    Ok(())
}

/// Whether `program` runs (`program --version` succeeds).
fn runs(program: &Path) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn build_rust(dir: &Path, out: &Path) -> anyhow::Result<()> {
    if !runs(Path::new("cargo")) {
        bail!(
            "cargo is not installed (it builds Rust plugins): install Rust with rustup, then run `{}` \
             and `switchyard plugin build` again",
            install_hint(Lang::Rust)
        );
    }
    ensure_wasm_target(dir)?;
    say(&format!("building {} with cargo (target {WASM_TARGET}, release)...", dir.display()));
    let output = Command::new("cargo")
        .args(["build", "--release", "--target", WASM_TARGET, "--message-format=json-render-diagnostics"])
        .current_dir(dir)
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!("cargo build of {} failed ({}); its output above says why", dir.display(), output.status);
    }
    // cargo names the artifact it wrote; the target directory may be anywhere (CARGO_TARGET_DIR).
    let artifact = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["kind"].to_string().contains("cdylib"))
        .filter_map(|m| {
            m["filenames"]
                .as_array()?
                .iter()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"))
                .map(PathBuf::from)
        })
        .next_back()
        .with_context(|| {
            format!(
                "cargo built {} but no .wasm library: Cargo.toml needs `crate-type = [\"cdylib\"]` under [lib]",
                dir.display()
            )
        })?;
    std::fs::copy(&artifact, out)
        .with_context(|| format!("cannot copy {} to {}", artifact.display(), out.display()))?;
    Ok(())
}

/// Adds the wasm32-wasip2 target to the toolchain that builds `dir`, when it lacks it.
fn ensure_wasm_target(dir: &Path) -> anyhow::Result<()> {
    let sysroot = Command::new("rustc").args(["--print", "sysroot"]).current_dir(dir).output();
    let sysroot = match sysroot {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => bail!("rustc does not run (cargo does): repair the Rust installation, e.g. `rustup update`"),
    };
    if sysroot.join("lib/rustlib").join(WASM_TARGET).is_dir() {
        return Ok(());
    }
    if !runs(Path::new("rustup")) {
        bail!(
            "the Rust toolchain at {} lacks the {WASM_TARGET} target and rustup is not there to add it: \
             install the target for this toolchain the way it was installed",
            sysroot.display()
        );
    }
    say(&format!("the {WASM_TARGET} target is missing; adding it: rustup target add {WASM_TARGET}"));
    run(Command::new("rustup").args(["target", "add", WASM_TARGET]).current_dir(dir), "adding the wasm target")
}

fn build_python(dir: &Path, out: &Path) -> anyhow::Result<()> {
    let missing = format!(
        "componentize-py is not installed (it builds Python plugins). In {}, run:\n  {}\n\
         (or `pip install componentize-py=={COMPONENTIZE_PY_VERSION}` into an environment on your PATH), \
         then `switchyard plugin build` again",
        dir.display(),
        install_hint(Lang::Python)
    );
    // A virtualenv in the project (what the README suggests) first, then PATH.
    let tool = Componentizer { name: "componentize-py", local: ".venv/bin/componentize-py", missing };
    tool.run(dir, &["-d", "wit", "-w", "policy", "componentize", "app", "-o"], out)
}

fn build_js(dir: &Path, out: &Path) -> anyhow::Result<()> {
    if !runs(Path::new("node")) {
        bail!(
            "node is not installed (jco runs on Node.js): install Node.js 20 or later, then run `npm install` in {}",
            dir.display()
        );
    }
    let jco = pinned_jco(dir)?;
    say(&format!("building {} with {}...", dir.display(), jco.display()));
    // Plugins get no network: without `--disable` jco imports wasi:http (for fetch), which the
    // host does not provide, and the component would not load.
    let args =
        ["componentize", "policy.js", "--wit", "wit", "--world-name", "policy", "--disable", "http", "fetch-event"];
    let out = out.file_name().expect("output paths end in a file name");
    run(Command::new(&jco).args(args).arg("-o").arg(out).current_dir(dir), "jco")
}

/// The npm package of jco, as package.json names it.
const JCO_PACKAGE: &str = "@bytecodealliance/jco";

/// The jco to build the project in `dir` with: its own (`node_modules/.bin/jco`, what `npm
/// install` puts there), else one on PATH, either only when it is the version package.json pins.
/// Another jco fails on a project in ways that do not say why (a wasm-tools stack trace), so a
/// mismatch is named with the command that installs the pinned one, and nothing is run.
fn pinned_jco(dir: &Path) -> anyhow::Result<PathBuf> {
    let pin = pinned_version(dir, JCO_PACKAGE)?;
    let install = format!("run `npm install` in {}", dir.display());
    let local = dir.join("node_modules/.bin/jco");
    if local.is_file() {
        let manifest = dir.join("node_modules").join(JCO_PACKAGE).join("package.json");
        let installed = std::fs::read_to_string(&manifest)
            .ok()
            .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
            .and_then(|v| v["version"].as_str().map(str::to_string));
        if let (Some(pin), Some(installed)) = (&pin, &installed)
            && !same_version(pin, installed)
        {
            bail!(
                "{} holds jco {installed}, but package.json pins {pin}: {install} to install the pinned one, \
                 then `switchyard plugin build` again",
                dir.join("node_modules").display()
            );
        }
        return Ok(local);
    }
    let Some(on_path) = version_of(Path::new("jco")) else {
        bail!(
            "jco is not installed (it builds JavaScript plugins). In {}, run:\n  {}\n\
             (its package.json pins {JCO_PACKAGE} {} and @bytecodealliance/componentize-js {COMPONENTIZE_JS_VERSION}), \
             then `switchyard plugin build` again",
            dir.display(),
            install_hint(Lang::Js),
            pin.as_deref().unwrap_or(JCO_VERSION),
        );
    };
    if let Some(pin) = pin.as_deref().filter(|pin| !same_version(pin, &on_path)) {
        bail!(
            "the jco on PATH is {on_path}, but {} pins {pin}, and {} has no node_modules/.bin/jco of its own: \
             {install} to install jco {pin} there (`plugin build` uses it before PATH), then `switchyard plugin build` again",
            dir.join("package.json").display(),
            dir.display()
        );
    }
    Ok(PathBuf::from("jco"))
}

/// The version of `package` that the project's package.json asks for (devDependencies or
/// dependencies); None when it names none, or has no package.json.
fn pinned_version(dir: &Path, package: &str) -> anyhow::Result<Option<String>> {
    let file = dir.join("package.json");
    let Ok(text) = std::fs::read_to_string(&file) else { return Ok(None) };
    let v: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not valid JSON; correct it (npm reads it too)", file.display()))?;
    let pinned = ["devDependencies", "dependencies"].iter().find_map(|key| v[key][package].as_str());
    Ok(pinned.map(str::to_string))
}

/// Whether `installed` is what `wanted` (a package.json version) asks for. Only an exact
/// version (`1.24.6`, `=1.24.6`) is compared; a range (`^1.24.6`) is npm's to resolve, and any
/// version passes it here.
fn same_version(wanted: &str, installed: &str) -> bool {
    let exact = wanted.trim().trim_start_matches('=').trim_start_matches('v');
    let is_exact = !exact.is_empty() && exact.chars().all(|c| c.is_ascii_digit() || c == '.');
    !is_exact || exact == installed.trim().trim_start_matches('v')
}

/// What `program --version` prints (its first word), when it runs.
fn version_of(program: &Path) -> Option<String> {
    let out = Command::new(program).arg("--version").stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    out.status.success().then(|| text.split_whitespace().next().unwrap_or_default().to_string())
}

/// The tool that makes a component of a Python or JavaScript project.
struct Componentizer {
    /// Its command on PATH.
    name: &'static str,
    /// Where a copy installed for the project lives, relative to it (preferred over PATH).
    local: &'static str,
    /// What to say when neither runs: what to install, with which command.
    missing: String,
}

impl Componentizer {
    /// Runs it in `dir` with `args` followed by the output file's name.
    fn run(self, dir: &Path, args: &[&str], out: &Path) -> anyhow::Result<()> {
        let local = dir.join(self.local);
        let tool = if local.is_file() { local } else { PathBuf::from(self.name) };
        if !runs(&tool) {
            bail!("{}", self.missing);
        }
        say(&format!("building {} with {}...", dir.display(), self.name));
        let out = out.file_name().expect("output paths end in a file name");
        run(Command::new(&tool).args(args).arg(out).current_dir(dir), self.name)
    }
}
