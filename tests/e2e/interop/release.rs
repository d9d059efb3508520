//! The release as a user installs it, on Linux: scripts/release.sh packages the binary under test,
//! npm installs the packed switchyard-mcp and its Linux package into a clean prefix and HOME with
//! no Rust on PATH, and install.sh installs from a local copy of the archives. Everything is
//! offline: npm installs the two tarballs and nothing else.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::npm_setup::repo_root;
use serde_json::json;
use switchyard_testkit::*;

const TARGET: &str =
    if cfg!(target_arch = "aarch64") { "aarch64-unknown-linux-gnu" } else { "x86_64-unknown-linux-gnu" };
const NPM_PLATFORM: &str =
    if cfg!(target_arch = "aarch64") { "switchyard-mcp-linux-arm64" } else { "switchyard-mcp-linux-x64" };
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A release of the binary under test in `dir/dist`, and a user's machine in `dir`: `home`,
/// the npm prefix `prefix`, and `tools`, a PATH directory with node, npm, npx and sh only.
struct Machine {
    dir: TempDir,
}

impl Machine {
    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// PATH: the npm prefix's bin, then node, npm, npx and sh (no cargo, rustc or rustup).
    fn path_var(&self) -> String {
        format!("{}:{}", self.path("prefix/bin").display(), self.path("tools").display())
    }

    /// `program args` with only the user's environment: HOME, PATH, npm's cache and prefix.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Command {
        let mut c = Command::new(program);
        c.args(args).env_clear().current_dir(self.path("home")).stdin(Stdio::null());
        for (k, v) in self.envs() {
            c.env(k, v);
        }
        c
    }

    fn envs(&self) -> Vec<(&'static str, String)> {
        vec![
            ("HOME", self.path("home").display().to_string()),
            ("PATH", self.path_var()),
            ("npm_config_cache", self.path("home/.npm").display().to_string()),
            ("npm_config_prefix", self.path("prefix").display().to_string()),
            ("npm_config_offline", "true".into()),
            ("npm_config_update_notifier", "false".into()),
            ("npm_config_fund", "false".into()),
            ("npm_config_audit", "false".into()),
        ]
    }
}

fn ok(c: &mut Command) -> String {
    let out = c.output().unwrap_or_else(|e| panic!("{c:?}: {e}"));
    assert!(out.status.success(), "{c:?} failed ({}):\n{}\n{}", out.status, text(&out.stdout), text(&out.stderr));
    text(&out.stdout)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The program `name` on this process's PATH.
fn which(name: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not on PATH (the release test needs Node.js with npm)"))
}

/// Packages the binary under test (stripped, as a release's is) with scripts/release.sh, and
/// lays out a user's machine beside it.
fn release() -> Machine {
    let m = Machine { dir: temp_dir() };
    for sub in ["home", "prefix", "tools", "packs"] {
        std::fs::create_dir_all(m.path(sub)).unwrap();
    }
    // npx runs a package's command with sh.
    for tool in ["node", "npm", "npx", "sh"] {
        std::os::unix::fs::symlink(which(tool).canonicalize().unwrap(), m.path("tools").join(tool)).unwrap();
    }
    let binary = m.path("switchyard");
    let stripped = Command::new("strip").arg("-o").arg(&binary).arg(bin()).status();
    if !stripped.is_ok_and(|s| s.success()) {
        std::fs::copy(bin(), &binary).unwrap();
    }
    let dist = m.path("dist");
    // Packaging a binary built elsewhere needs no Rust: only the system's tools on PATH.
    ok(Command::new("bash")
        .arg(repo_root().join("scripts/release.sh"))
        .args(["--target", TARGET, "--binary"])
        .arg(&binary)
        .arg("--out")
        .arg(&dist)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin"));
    m
}

#[tokio::test]
async fn npm_and_install_sh_install_the_release_and_wrap_writes_the_installed_path() {
    let started = std::time::Instant::now();
    let m = release();
    let dist = m.path("dist");
    let archive = format!("switchyard-{VERSION}-{TARGET}.tar.gz");
    let listing = ok(Command::new("tar").arg("-tzf").arg(dist.join(&archive)));
    for file in ["switchyard", "LICENSE", "README.md"] {
        assert!(listing.contains(&format!("switchyard-{VERSION}-{TARGET}/{file}\n")), "{file} missing:\n{listing}");
    }
    assert!(std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap().contains(&archive));
    // A release of one target is not published: switchyard-mcp would name packages that are not
    // there. (This stops before npm is asked anything.)
    let publish = Command::new("bash")
        .arg(repo_root().join("scripts/release.sh"))
        .args(["--publish", "--out"])
        .arg(&dist)
        .output()
        .unwrap();
    let said = text(&publish.stderr);
    assert!(!publish.status.success() && said.contains("lacks the targets"), "{said}");

    // As a user would from the registry: the packed packages, installed globally.
    let packs = m.path("packs");
    let main_dir = dist.join("npm/switchyard-mcp");
    let platform_dir = dist.join("npm").join(NPM_PLATFORM);
    ok(m.command("npm", &["pack", "--pack-destination"]).arg(&packs).arg(&main_dir).arg(&platform_dir));
    let tarballs = [format!("switchyard-mcp-{VERSION}.tgz"), format!("{NPM_PLATFORM}-{VERSION}.tgz")];
    let tarballs: Vec<String> = tarballs.iter().map(|t| packs.join(t).display().to_string()).collect();
    ok(&mut m.command("npm", &["install", "--global", &tarballs[0], &tarballs[1]]));
    for tool in ["cargo", "rustc", "rustup"] {
        let found = m.command("/bin/sh", &["-c", &format!("command -v {tool}")]).output().unwrap();
        assert!(!found.status.success(), "{tool} is on the user's PATH: {}", text(&found.stdout));
    }
    let version = ok(&mut m.command("switchyard", &["--version"]));
    assert_eq!(version.trim(), format!("switchyard {VERSION}"));

    // `npx switchyard-mcp run -- SERVER` in front of the fixture, answering a tool call.
    let mut argv = vec!["npx".to_string(), "switchyard-mcp".into(), "run".into(), "--".into()];
    argv.extend(Proc::fixture_cmd(&[]));
    let envs = m.envs();
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut npx = Proc::spawn_only_env("npx switchyard-mcp run", &resolve_first(&m, argv), &envs);
    let mut client = npx.client();
    client.initialize().await;
    assert_eq!(client.call_text("echo", json!({"text": "through npx"})).await, "through npx");
    drop(client);
    drop(npx);

    // `wrap` writes the installed binary's path, whether run as `switchyard` or through npx.
    let installed = m.path("prefix/lib/node_modules").join(NPM_PLATFORM).join("bin/switchyard");
    assert_eq!(wrapped_command(&m, &m.command("switchyard", &[])), installed.display().to_string());
    assert_eq!(wrapped_command(&m, &m.command("npx", &["switchyard-mcp"])), installed.display().to_string());

    // From npx's cache (a copy of the packages under `_npx`), `wrap` writes the switchyard on PATH
    // instead, or with none there says to install one and writes nothing.
    let cache = m.path("home/.npm/_npx/0123abcd/node_modules");
    std::fs::create_dir_all(cache.join(NPM_PLATFORM).join("bin")).unwrap();
    ok(Command::new("cp").arg("-R").arg(m.path("prefix/lib/node_modules/switchyard-mcp")).arg(&cache));
    std::fs::hard_link(&installed, cache.join(NPM_PLATFORM).join("bin/switchyard")).unwrap();
    std::fs::copy(platform_dir.join("package.json"), cache.join(NPM_PLATFORM).join("package.json")).unwrap();
    let launcher = cache.join("switchyard-mcp/bin/switchyard.js");
    let mut from_cache = m.command("node", &[launcher.to_str().unwrap()]);
    assert_eq!(wrapped_command(&m, &from_cache), m.path("prefix/bin/switchyard").display().to_string());
    from_cache.env("PATH", m.path("tools"));
    let out = wrap(&m, &mut from_cache);
    assert!(!out.status.success(), "wrap from npx's cache with no switchyard on PATH succeeded");
    let said = text(&out.stderr);
    assert!(said.contains("npx cache") && said.contains("npm install -g switchyard-mcp"), "{said}");

    install_sh(&m);
    // What this adds to a test run, for the record in the failure output of a slow run.
    eprintln!("release test: {:?}", started.elapsed());
}

/// `argv` with its program found on the machine's PATH (Proc spawns it with that PATH, but looks
/// the program up in this process's).
fn resolve_first(m: &Machine, mut argv: Vec<String>) -> Vec<String> {
    argv[0] = m.path("tools").join(&argv[0]).display().to_string();
    argv
}

/// Runs `base wrap --client cursor` on a fresh Cursor config and returns the command written
/// into its entry.
fn wrapped_command(m: &Machine, base: &Command) -> String {
    let mut c = Command::new(base.get_program());
    c.args(base.get_args()).env_clear().current_dir(m.path("home")).stdin(Stdio::null());
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    let out = wrap(m, &mut c);
    assert!(out.status.success(), "wrap failed ({}):\n{}\n{}", out.status, text(&out.stdout), text(&out.stderr));
    let file = m.path("home/.cursor/mcp.json");
    let entry: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    entry["mcpServers"]["files"]["command"].as_str().expect("a wrapped entry").to_string()
}

/// `c wrap --client cursor` on a Cursor config with one server, written anew.
fn wrap(m: &Machine, c: &mut Command) -> Output {
    let file = m.path("home/.cursor/mcp.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(
        &file,
        "{\"mcpServers\": {\"files\": {\"command\": \"npx\", \"args\": [\"-y\", \"some-server\"]}}}\n",
    )
    .unwrap();
    let _ = std::fs::remove_file(m.path("home/switchyard.toml"));
    let config = m.path("home/switchyard.toml");
    c.args(["wrap", "--client", "cursor", "--config", config.to_str().unwrap()]).output().unwrap()
}

/// install.sh from a local copy of the archives (with the system's tools on PATH, as a shell
/// has them): installs into ~/.local/bin and says how to put it on PATH; a tampered archive is
/// refused and nothing is installed.
fn install_sh(m: &Machine) {
    let dist = m.path("dist");
    let to = m.path("home/.local/bin");
    let sh = |script: &Path, from: &Path| {
        let mut c = m.command("/bin/sh", &[script.to_str().unwrap(), "--from", from.to_str().unwrap()]);
        c.env("PATH", "/usr/bin:/bin");
        c
    };
    let out = sh(&dist.join("install.sh"), &dist).output().unwrap();
    let said = text(&out.stderr);
    assert!(out.status.success(), "install.sh failed:\n{said}");
    assert!(said.contains(&format!("installed {}/switchyard", to.display())), "{said}");
    assert!(said.contains("is not on PATH") && said.contains("export PATH="), "{said}");
    let version = ok(&mut m.command(to.join("switchyard"), &["--version"]));
    assert_eq!(version.trim(), format!("switchyard {VERSION}"));

    let tampered = m.path("tampered");
    ok(Command::new("cp").arg("-R").arg(&dist).arg(&tampered));
    let archive = tampered.join(format!("switchyard-{VERSION}-{TARGET}.tar.gz"));
    let mut bytes = std::fs::read(&archive).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0xff;
    std::fs::write(&archive, bytes).unwrap();
    let elsewhere = m.path("home/other-bin");
    let out = sh(&tampered.join("install.sh"), &tampered).args(["--to", elsewhere.to_str().unwrap()]).output().unwrap();
    let said = text(&out.stderr);
    assert!(!out.status.success(), "a tampered archive was installed:\n{said}");
    assert!(
        said.contains("does not match its checksum in SHA256SUMS") && said.contains("nothing was installed"),
        "{said}"
    );
    assert!(!elsewhere.join("switchyard").exists(), "a file was installed from the tampered archive");
}
