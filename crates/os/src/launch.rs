//! How a server's command is found, as the OS would find it, so a missing one is reported at
//! once with what to check.
//!
//! - Unix: a name with a `/` is a path; otherwise each PATH entry (`:`-separated) is tried for
//!   an executable file, as `execvp` does.
//! - Windows: a name is tried with each extension of PATHEXT (`.COM;.EXE;.BAT;.CMD` when unset)
//!   unless it has one, first in the directory itself when it names one, else in each PATH
//!   entry (`;`-separated). `CreateProcess("npx")` alone finds only `npx.exe`, never the
//!   `npx.cmd` shim that npm installs, so the resolved path is what gets started; for a `.cmd`
//!   or `.bat` file the standard library runs `cmd.exe` and quotes the arguments for it.

use std::path::{Path, PathBuf};

/// The file `command` starts, searched in `path` (a server's own PATH, else this process's).
pub fn resolve(command: &str, path: Option<&str>) -> std::io::Result<PathBuf> {
    let path = path.map(str::to_string).or_else(|| std::env::var("PATH").ok()).unwrap_or_default();
    if cfg!(windows) {
        let pathext = std::env::var("PATHEXT").ok();
        resolve_windows(command, &path, pathext.as_deref(), &|p| p.is_file())
    } else {
        resolve_unix(command, &path, &is_executable)
    }
}

/// Whether `path` is a file this user may execute.
#[cfg(unix)]
pub fn is_executable(path: &Path) -> bool {
    rustix::fs::access(path, rustix::fs::Access::EXEC_OK).is_ok() && path.is_file()
}

/// Whether `path` is a file (Windows decides by extension, not by a mode bit).
#[cfg(windows)]
pub fn is_executable(path: &Path) -> bool {
    path.is_file()
}

fn not_found(command: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotFound, format!("`{command}` is not on PATH"))
}

/// The Unix search, with `executable` telling a runnable file.
pub fn resolve_unix(command: &str, path: &str, executable: &dyn Fn(&Path) -> bool) -> std::io::Result<PathBuf> {
    if command.contains('/') {
        let file = PathBuf::from(command);
        return match std::fs::metadata(&file) {
            // The OS's own words for a path that is not there ("No such file or directory").
            Err(e) => Err(e),
            Ok(_) if executable(&file) => Ok(file),
            Ok(_) => {
                Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, format!("{command} is not executable")))
            }
        };
    }
    let mut denied = None;
    for dir in path.split(':') {
        let dir = if dir.is_empty() { "." } else { dir };
        let file = Path::new(dir).join(command);
        if executable(&file) {
            return Ok(file);
        }
        // A file that is there but not executable is the more useful error to show.
        if denied.is_none() && file.is_file() {
            denied = Some(file);
        }
    }
    match denied {
        Some(file) => Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} is on PATH but not executable", file.display()),
        )),
        None => Err(not_found(command)),
    }
}

/// The Windows search, with `exists` telling a file. `pathext` is PATHEXT as set (None: unset).
pub fn resolve_windows(
    command: &str,
    path: &str,
    pathext: Option<&str>,
    exists: &dyn Fn(&Path) -> bool,
) -> std::io::Result<PathBuf> {
    let exts: Vec<String> = pathext
        .filter(|p| !p.trim().is_empty())
        .unwrap_or(".COM;.EXE;.BAT;.CMD")
        .split(';')
        .filter(|e| e.starts_with('.') && e.len() > 1)
        .map(str::to_ascii_lowercase)
        .collect();
    let named_ext = Path::new(command)
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy().to_ascii_lowercase()))
        .filter(|e| exts.contains(e));
    let candidates = |base: PathBuf| -> Vec<PathBuf> {
        match &named_ext {
            Some(_) => vec![base],
            None => exts
                .iter()
                .map(|e| {
                    let mut name = base.clone().into_os_string();
                    name.push(e);
                    PathBuf::from(name)
                })
                .collect(),
        }
    };
    let has_dir = command.contains(['\\', '/']) || command.chars().nth(1) == Some(':');
    let bases: Vec<PathBuf> = if has_dir {
        vec![PathBuf::from(command)]
    } else {
        // Joined with Windows' separator whatever OS runs the search (its tests run on Linux).
        path.split(';')
            .map(|d| d.trim().trim_matches('"'))
            .filter(|d| !d.is_empty())
            .map(|d| PathBuf::from(format!("{}\\{command}", d.trim_end_matches(['\\', '/']))))
            .collect()
    };
    for base in bases {
        for file in candidates(base) {
            if exists(&file) {
                return Ok(file);
            }
        }
    }
    if has_dir {
        return Err(std::io::Error::new(std::io::ErrorKind::NotFound, format!("{command} does not exist")));
    }
    Err(not_found(command))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// A file system that holds `list`, its names compared without case as Windows does.
    fn files(list: &[&str]) -> impl Fn(&Path) -> bool {
        let set: HashSet<String> = list.iter().map(|f| f.to_lowercase()).collect();
        move |p: &Path| set.contains(&p.to_string_lossy().to_lowercase())
    }

    #[test]
    fn windows_finds_the_npm_cmd_shim_that_createprocess_misses() {
        let exists = files(&[r"C:\node\npx.cmd", r"C:\node\node.exe"]);
        let path = r"C:\Windows\system32;C:\node";
        let npx = resolve_windows("npx", path, None, &exists).unwrap();
        assert_eq!(npx, PathBuf::from(r"C:\node\npx.cmd"));
        assert_eq!(resolve_windows("node", path, None, &exists).unwrap(), PathBuf::from(r"C:\node\node.exe"));
    }

    #[test]
    fn windows_follows_pathext_order_and_a_named_extension() {
        let exists = files(&[r"C:\bin\uvx.cmd", r"C:\bin\uvx.exe"]);
        // .EXE before .CMD in the default PATHEXT.
        assert_eq!(resolve_windows("uvx", r"C:\bin", None, &exists).unwrap(), PathBuf::from(r"C:\bin\uvx.exe"));
        assert_eq!(
            resolve_windows("uvx", r"C:\bin", Some(".CMD;.EXE"), &exists).unwrap(),
            PathBuf::from(r"C:\bin\uvx.cmd")
        );
        // Named with its extension: that file only, in any letter case PATHEXT lists.
        assert_eq!(resolve_windows("uvx.CMD", r"C:\bin", None, &exists).unwrap(), PathBuf::from(r"C:\bin\uvx.CMD"));
    }

    #[test]
    fn windows_a_path_is_not_searched_and_a_missing_name_says_so() {
        let exists = files(&[r"D:\tools\server.bat"]);
        assert_eq!(
            resolve_windows(r"D:\tools\server", r"C:\elsewhere", None, &exists).unwrap(),
            PathBuf::from(r"D:\tools\server.bat")
        );
        let e = resolve_windows(r"D:\tools\gone.exe", r"C:\elsewhere", None, &exists).unwrap_err();
        assert!(e.to_string().contains(r"D:\tools\gone.exe does not exist"), "{e}");
        let e = resolve_windows("missing", r"C:\bin;;C:\x", Some(""), &exists).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(e.to_string().contains("`missing` is not on PATH"), "{e}");
    }

    #[cfg(unix)]
    #[test]
    fn unix_searches_path_and_names_a_file_that_cannot_run() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        std::fs::write(dir.path().join("plain"), "x").unwrap();
        let yes = |p: &Path| p.ends_with("tool");
        let e = resolve_unix("/no/such/dir/tool", d, &yes).unwrap_err();
        assert!(e.to_string().contains("No such file"), "{e}");
        assert_eq!(resolve_unix("tool", &format!("/nowhere:{d}"), &yes).unwrap(), PathBuf::from("/nowhere/tool"));
        let no = |_: &Path| false;
        let e = resolve_unix("plain", &format!("/nowhere:{d}"), &no).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
        let e = resolve_unix("absent", d, &no).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        let e = resolve_unix("/no/such/file", d, &no).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }

    #[cfg(unix)]
    #[test]
    fn this_systems_search_finds_sh() {
        assert!(resolve("sh", Some("/usr/bin:/bin")).unwrap().ends_with("sh"));
    }
}
