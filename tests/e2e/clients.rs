//! `switchyard clients` through the real binary: the client configs of a home and a project.

mod harness;

use std::path::Path;

use harness::*;

fn place(from: &str, to: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/clients").join(from);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(src, to).unwrap();
}

/// Every client's file in a home and a project is listed with its servers, wrapped ones named,
/// a broken file reported with its line, and no secret shown; nothing is written.
#[test]
fn clients_lists_every_config_of_a_home_and_a_project_and_writes_nothing() {
    let dir = temp_dir();
    let (home, project) = (dir.path().join("home"), dir.path().join("work"));
    place("claude_desktop_config.json", &home.join(".config/Claude/claude_desktop_config.json"));
    place("claude.json", &home.join(".claude.json"));
    place("cursor.mcp.json", &home.join(".cursor/mcp.json"));
    place("project.mcp.json", &project.join(".mcp.json"));
    place("broken.vscode.mcp.json", &project.join(".vscode/mcp.json"));
    let before = snapshot(dir.path());
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin())
            .arg("clients")
            .args(args)
            .arg("--project")
            .arg(&project)
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .env_remove("APPDATA")
            .env_remove("CLAUDE_CONFIG_DIR")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&[]);
    for want in [
        "claude-desktop ~/.config/Claude/claude_desktop_config.json",
        "claude-code ~/.claude.json (user)",
        "cursor ~/.cursor/mcp.json",
        "through switchyard (server `shop-db`)",
        "cannot be read",
        "line 9, column 5",
    ] {
        assert!(text.contains(want), "{want:?} missing:\n{text}");
    }
    assert!(!text.contains("Bearer"), "a secret was shown:\n{text}");
    let json: serde_json::Value = serde_json::from_str(&run(&["--json"])).unwrap();
    let files = json.as_array().unwrap();
    assert!(files.iter().any(|f| f["client"] == "claude-code" && f["scope"] == "project /home/user/shop"), "{json:#}");
    assert!(
        files.iter().any(|f| f["client"] == "vscode" && f["error"].as_str().is_some_and(|e| e.contains("line 9"))),
        "{json:#}"
    );
    assert!(!json.to_string().contains("Bearer"));
    assert_eq!(snapshot(dir.path()), before, "clients changed a file");
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}
