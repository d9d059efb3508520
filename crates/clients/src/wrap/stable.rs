//! Which switchyard a wrapped entry runs: one that is still there after an upgrade, never a copy
//! in a cache or build directory that the next `npx` run or `cargo build` replaces.
//!
//! In order: the path a launcher or package names in `SWITCHYARD_STABLE_BIN` (the npm package's
//! launcher sets it to the binary of a global or project install); the `switchyard` on PATH that
//! is this very binary (a package manager's link, say `/opt/homebrew/bin/switchyard`, which stays
//! while the versioned directory it points into changes); this binary where it is, unless that is
//! a temporary place; another `switchyard` on PATH. Otherwise `wrap` stops and says what to do.

use std::path::{Component, Path, PathBuf};

use anyhow::bail;

/// The variable a launcher sets to the switchyard that client entries should run.
const STABLE_BIN_VAR: &str = "SWITCHYARD_STABLE_BIN";

/// The binary's file name on this OS.
const FILE: &str = if cfg!(windows) { "switchyard.exe" } else { "switchyard" };

/// The switchyard that wrapped entries run, and a line to print when it is not the running one.
/// `exe` is the running binary's path; `env` reads the environment (`SWITCHYARD_STABLE_BIN`,
/// `PATH`).
pub fn switchyard(exe: &Path, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<(PathBuf, Option<String>)> {
    if let Some(named) = env(STABLE_BIN_VAR).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&named);
        if !path.is_absolute() || !path.is_file() {
            bail!(
                "{STABLE_BIN_VAR} is {named:?}, which is not the absolute path of a file: set it to the switchyard that client entries should run, or unset it"
            );
        }
        return Ok((path, None));
    }
    let real = switchyard_os::fs::canonicalize(exe).unwrap_or_else(|_| exe.to_path_buf());
    let on_path = on_path(env("PATH").as_deref());
    if let Some(same) = on_path.iter().find(|p| switchyard_os::fs::canonicalize(p).ok().as_deref() == Some(&real)) {
        return Ok((same.clone(), None));
    }
    let Some(why) = transient(&real) else {
        return Ok((real, None));
    };
    if let Some(other) = on_path.into_iter().next() {
        let note = format!(
            "note: this switchyard runs from {} ({why}); the entries run {}, the switchyard on PATH",
            real.display(),
            other.display()
        );
        return Ok((other, Some(note)));
    }
    bail!(
        "this switchyard runs from {} ({why}), so client entries must not point at it, and no other switchyard is on PATH: install it (`npm install -g switchyard-mcp`, the release's install script, or `cargo install --locked --path crates/switchyard`) and run `switchyard wrap` again",
        real.display()
    )
}

/// Every `switchyard` in the directories of `path` (a PATH value), in order, except those in a
/// temporary place (npx puts its cache's `.bin` first on the PATH of what it runs).
fn on_path(path: Option<&str>) -> Vec<PathBuf> {
    let Some(path) = path else { return Vec::new() };
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(FILE))
        .filter(|p| runnable(p) && transient(p).is_none())
        .collect()
}

fn runnable(p: &Path) -> bool {
    match std::fs::metadata(p) {
        #[cfg(unix)]
        Ok(m) => m.is_file() && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0,
        #[cfg(not(unix))]
        Ok(m) => m.is_file(),
        Err(_) => false,
    }
}

/// Why `path` is a place whose files go away or change under an entry that names them, if it is:
/// a package runner's cache (npx, pnpm or yarn `dlx`, bunx) or a cargo build directory (a
/// directory cargo keeps `.fingerprint` in, or its `deps`).
fn transient(path: &Path) -> Option<&'static str> {
    for c in path.components() {
        let Component::Normal(name) = c else { continue };
        let name = name.to_string_lossy();
        if name == "_npx" {
            return Some("npm's npx cache, which npm replaces and clears");
        }
        if name == "dlx" || name.starts_with("dlx-") || name.starts_with("bunx-") {
            return Some("a package runner's temporary directory");
        }
    }
    let dir = path.parent()?;
    let dir = if dir.file_name().is_some_and(|n| n == "deps") { dir.parent()? } else { dir };
    dir.join(".fingerprint").is_dir().then_some("a cargo build directory, which the next build replaces")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exe_in(dir: &Path) -> PathBuf {
        std::fs::create_dir_all(dir).unwrap();
        let p = dir.join(FILE);
        std::fs::write(&p, "").unwrap();
        #[cfg(unix)]
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        p
    }

    fn env_of(vars: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
    }

    fn paths(dirs: &[&Path]) -> String {
        std::env::join_paths(dirs).unwrap().into_string().unwrap()
    }

    #[test]
    fn caches_and_build_directories_are_transient_and_install_directories_are_not() {
        let t = tempfile::tempdir().unwrap();
        let build = t.path().join("target/debug");
        std::fs::create_dir_all(build.join(".fingerprint")).unwrap();
        assert!(transient(&build.join(FILE)).unwrap().contains("cargo build"));
        assert!(transient(&build.join("deps").join(FILE)).unwrap().contains("cargo build"));
        let npx = Path::new("/home/me/.npm/_npx/1a2b/node_modules/switchyard-mcp-linux-x64/bin/switchyard");
        assert!(transient(npx).unwrap().contains("npx"));
        assert!(transient(Path::new("/tmp/bunx-0-switchyard-mcp@0.1.0/node_modules/x/bin/switchyard")).is_some());
        assert!(transient(Path::new("/home/me/.cache/pnpm/dlx/abc/node_modules/x/bin/switchyard")).is_some());
        for stable in [
            "/home/me/.cargo/bin/switchyard",
            "/home/me/.local/bin/switchyard",
            "/usr/lib/node_modules/switchyard-mcp/node_modules/switchyard-mcp-linux-x64/bin/switchyard",
        ] {
            assert_eq!(transient(Path::new(stable)), None, "{stable}");
        }
    }

    #[test]
    fn a_launchers_path_comes_first_and_must_name_a_file() {
        let t = tempfile::tempdir().unwrap();
        let named = exe_in(&t.path().join("npm/lib/node_modules/x/bin"));
        let env = env_of(vec![(STABLE_BIN_VAR, named.display().to_string())]);
        assert_eq!(switchyard(Path::new("/elsewhere/switchyard"), &env).unwrap(), (named, None));
        let env = env_of(vec![(STABLE_BIN_VAR, "relative/switchyard".into())]);
        let e = switchyard(Path::new("/elsewhere/switchyard"), &env).unwrap_err().to_string();
        assert!(e.contains(STABLE_BIN_VAR) && e.contains("unset it"), "{e}");
    }

    #[test]
    fn this_binary_is_named_by_its_link_on_path_or_else_by_its_own_path() {
        let t = tempfile::tempdir().unwrap();
        let real = exe_in(&t.path().join("Cellar/switchyard/0.1.0/bin"));
        let bin = t.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(&real, bin.join(FILE)).unwrap();
            let env = env_of(vec![("PATH", paths(&[&bin]))]);
            assert_eq!(switchyard(&real, &env).unwrap(), (bin.join(FILE), None));
        }
        let env = env_of(vec![("PATH", paths(&[&t.path().join("empty")]))]);
        let want = switchyard_os::fs::canonicalize(&real).unwrap();
        assert_eq!(switchyard(&real, &env).unwrap(), (want, None));
    }

    #[test]
    fn from_a_build_directory_the_switchyard_on_path_is_written_or_wrap_says_what_to_do() {
        let t = tempfile::tempdir().unwrap();
        let build = t.path().join("target/release");
        std::fs::create_dir_all(build.join(".fingerprint")).unwrap();
        let built = exe_in(&build);
        let installed = exe_in(&t.path().join("home/.local/bin"));
        // The build directory itself on PATH is skipped.
        let env = env_of(vec![("PATH", paths(&[&build, installed.parent().unwrap()]))]);
        let (path, note) = switchyard(&built, &env).unwrap();
        assert_eq!(path, installed);
        assert!(note.unwrap().contains("a cargo build directory"));
        let env = env_of(vec![("PATH", paths(&[&build]))]);
        let e = switchyard(&built, &env).unwrap_err().to_string();
        assert!(e.contains("a cargo build directory") && e.contains("npm install -g switchyard-mcp"), "{e}");
    }
}
