//! `switchyard clients` through the real binary: the client configs of a home and a project.

use std::path::Path;

use switchyard_testkit::*;

fn place(from: &str, to: &Path) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/clients").join(from);
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
    place("codex.config.toml", &home.join(".codex/config.toml"));
    place("gemini.settings.json", &project.join(".gemini/settings.json"));
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
            .env_remove("CODEX_HOME")
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
        "codex ~/.codex/config.toml (user)",
        "ünï code",
        "through switchyard (server `memory`)",
        "gemini ",
        "`tcp` (a WebSocket)",
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

/// `switchyard wrap|unwrap ARGS` as the user `home` runs it, in `cwd`; stdout, or the test fails
/// with stderr.
fn switchyard_in(home: &switchyard_testkit::daemon::Home, cwd: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin())
        .args(args)
        .current_dir(cwd)
        .envs(home.envs())
        .env_remove("APPDATA")
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("CODEX_HOME")
        // The binary under test lives in cargo's build directory, which wrap never writes into a
        // client's entry by itself (see `wrap_from_a_build_directory_...`).
        .env("SWITCHYARD_STABLE_BIN", bin())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn ok(out: std::process::Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "failed ({}):\n{text}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    text
}

/// The files of every client, placed where each client keeps them in `home` and a project.
fn place_all(home: &switchyard_testkit::daemon::Home) -> (std::path::PathBuf, Vec<std::path::PathBuf>) {
    let (h, project) = (home.path(), home.path().join("work"));
    let files = vec![
        h.join("config/Claude/claude_desktop_config.json"),
        h.join(".claude.json"),
        h.join(".cursor/mcp.json"),
        project.join(".mcp.json"),
        project.join(".vscode/mcp.json"),
        h.join(".codex/config.toml"),
        project.join(".gemini/settings.json"),
    ];
    let sources = [
        "claude_desktop_config.json",
        "claude.json",
        "cursor.mcp.json",
        "project.mcp.json",
        "vscode.mcp.json",
        "codex.config.toml",
        "gemini.settings.json",
    ];
    for (from, to) in sources.iter().zip(&files) {
        place(from, to);
    }
    (project, files)
}

/// `--dry-run` prints the change as a diff and writes nothing at all: no client file, no
/// switchyard.toml, no backup, no record.
#[test]
fn wrap_dry_run_shows_a_diff_and_writes_nothing() {
    let home = switchyard_testkit::daemon::Home::new();
    let (project, _) = place_all(&home);
    let before = snapshot(home.path());
    for client in ["claude-desktop", "claude-code", "cursor", "vscode", "codex", "gemini"] {
        let text = ok(switchyard_in(&home, &project, &["wrap", "--client", client, "--dry-run"]));
        assert!(text.contains("(dry run: nothing was written)"), "{text}");
        assert!(text.contains("\n+") && text.contains("\n-") && text.contains("@@"), "no diff for {client}:\n{text}");
        assert!(text.contains("+[servers."), "no switchyard.toml diff for {client}:\n{text}");
    }
    assert_eq!(snapshot(home.path()), before, "a dry run wrote something");
}

/// Every client's file: wrap puts each server behind switchyard (backup beside the file), a
/// second wrap changes nothing, unwrap gives back every file byte for byte; a config file that
/// is a link stays a link.
#[test]
fn wrap_then_unwrap_gives_every_file_back_byte_for_byte() {
    let home = switchyard_testkit::daemon::Home::new();
    let (project, files) = place_all(&home);
    // Cursor's file is a link into a dotfiles directory, as stow or home-manager make it.
    let cursor = &files[2];
    let dotfile = home.path().join("dotfiles/cursor-mcp.json");
    std::fs::create_dir_all(dotfile.parent().unwrap()).unwrap();
    std::fs::rename(cursor, &dotfile).unwrap();
    std::os::unix::fs::symlink(&dotfile, cursor).unwrap();
    let originals: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let clients = ["claude-desktop", "claude-code", "cursor", "vscode", "codex", "gemini"];
    for client in clients {
        let text = ok(switchyard_in(&home, &project, &["wrap", "--client", client]));
        assert!(text.contains("wrote "), "{text}");
    }
    let backups: Vec<(String, Vec<u8>)> = std::fs::read_dir(home.path().join("state/switchyard/wrapped/backups"))
        .unwrap()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    for (file, original) in files.iter().zip(&originals) {
        assert_ne!(&std::fs::read(file).unwrap(), original, "{} not wrapped", file.display());
        let real = std::fs::canonicalize(file).unwrap();
        let name = real.file_name().unwrap().to_str().unwrap();
        // Kept in the state directory, not beside the file (which may be in a repository).
        assert!(
            backups.iter().any(|(n, text)| n.starts_with(&format!("{name}-")) && text == original),
            "no backup of {} in the state directory",
            file.display()
        );
        assert!(
            !real.with_file_name(format!("{name}.switchyard-backup")).exists(),
            "a backup beside {}",
            file.display()
        );
    }
    assert!(std::fs::symlink_metadata(cursor).unwrap().file_type().is_symlink(), "the link was replaced by a file");
    let config = home.path().join("config/switchyard/switchyard.toml");
    let toml = std::fs::read_to_string(&config).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&config).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(toml.contains("[servers.filesystem]") && toml.contains("[servers.sentry]"), "{toml}");
    let listed = ok(switchyard_in(&home, &project, &["clients"]));
    assert!(listed.contains("through switchyard (server `sentry`)"), "{listed}");

    let wrapped: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    for client in clients {
        let text = ok(switchyard_in(&home, &project, &["wrap", "--client", client]));
        assert!(text.contains("nothing to wrap"), "{text}");
    }
    let again: Vec<Vec<u8>> = files.iter().map(|f| std::fs::read(f).unwrap()).collect();
    assert_eq!(again, wrapped, "a second wrap changed a file");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), toml, "a second wrap changed switchyard.toml");

    let before = snapshot(home.path());
    for client in clients {
        let text = ok(switchyard_in(&home, &project, &["unwrap", "--client", client, "--dry-run"]));
        assert!(text.contains("(dry run: nothing was written)") && text.contains("\n+"), "{text}");
    }
    assert_eq!(snapshot(home.path()), before, "unwrap --dry-run wrote something");
    for client in clients {
        let text = ok(switchyard_in(&home, &project, &["unwrap", "--client", client]));
        assert!(text.contains("put back"), "{text}");
        assert!(!text.contains("changed since"), "{text}");
    }
    for (file, original) in files.iter().zip(&originals) {
        assert_eq!(&std::fs::read(file).unwrap(), original, "{} is not as it was", file.display());
    }
    assert!(std::fs::symlink_metadata(cursor).unwrap().file_type().is_symlink());
    let text = ok(switchyard_in(&home, &project, &["unwrap", "--client", "cursor"]));
    assert!(text.contains("nothing to unwrap"), "{text}");
}

/// After wrap, the user edits the file elsewhere: unwrap puts the entries back, keeps the edit
/// and says so.
#[test]
fn unwrap_after_an_edit_keeps_the_edit_and_says_so() {
    let home = switchyard_testkit::daemon::Home::new();
    let file = home.path().join("config/Claude/claude_desktop_config.json");
    place("claude_desktop_config.json", &file);
    let original = std::fs::read_to_string(&file).unwrap();
    ok(switchyard_in(&home, home.path(), &["wrap", "--client", "claude-desktop"]));
    let wrapped = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, wrapped.replace("Alt+Space", "Ctrl+Space")).unwrap();
    let text = ok(switchyard_in(&home, home.path(), &["unwrap", "--client", "claude-desktop"]));
    assert!(text.contains("changed since switchyard wrote it"), "{text}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original.replace("Alt+Space", "Ctrl+Space"));
}

/// Each write keeps its own backup: after wrap, unwrap and wrap again, the file as it was before
/// the first wrap is still among the backups byte for byte, and each write names another one.
#[test]
fn wrap_and_unwrap_each_keep_their_own_backup_and_the_original_stays() {
    let home = switchyard_testkit::daemon::Home::new();
    let file = home.path().join(".claude.json");
    place("claude.json", &file);
    let original = std::fs::read(&file).unwrap();
    let named = |text: &str| {
        let at = text.find("the file as it was is in ").unwrap_or_else(|| panic!("no backup named:\n{text}"));
        let rest = &text[at + "the file as it was is in ".len()..];
        rest[..rest.find([';', ')']).unwrap()].to_string()
    };
    let wrap = ok(switchyard_in(&home, home.path(), &["wrap", "--client", "claude-code"]));
    let wrapped = std::fs::read(&file).unwrap();
    let unwrap = ok(switchyard_in(&home, home.path(), &["unwrap", "--client", "claude-code"]));
    assert_eq!(std::fs::read(&file).unwrap(), original);
    let again = ok(switchyard_in(&home, home.path(), &["wrap", "--client", "claude-code"]));
    let paths = [named(&wrap), named(&unwrap), named(&again)];
    assert!(paths[0] != paths[1] && paths[1] != paths[2] && paths[0] != paths[2], "{paths:?}");
    assert_eq!(std::fs::read(&paths[0]).unwrap(), original, "wrap's backup");
    assert_eq!(std::fs::read(&paths[1]).unwrap(), wrapped, "unwrap's backup");
    assert!(unwrap.contains(&format!("before switchyard first wrote it, in {}", paths[0])), "{unwrap}");
    let dir = home.path().join("state/switchyard/wrapped/backups");
    let kept: Vec<Vec<u8>> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| std::fs::read(e.path()).unwrap()).collect();
    assert_eq!(kept.len(), 3);
    assert!(kept.contains(&original), "the file before the first wrap is gone from the backups");
}

/// A file that does not parse: the error names file, line and column; nothing is written.
#[test]
fn wrap_of_a_broken_file_names_line_and_column_and_writes_nothing() {
    let home = switchyard_testkit::daemon::Home::new();
    let project = home.path().join("work");
    place("broken.vscode.mcp.json", &project.join(".vscode/mcp.json"));
    let before = snapshot(home.path());
    let out = switchyard_in(&home, &project, &["wrap", "--client", "vscode"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains(".vscode/mcp.json") && stderr.contains("line 9, column 5"), "{stderr}");
    assert_eq!(snapshot(home.path()), before);
}

/// The wrapped entry, launched as the client launches it (its command, args and env, with the
/// client's `${VAR:-default}` expanded as Claude Code does), answers a tool call through the
/// daemon; two values of the client's variable reach two servers, each its own.
#[tokio::test]
async fn a_wrapped_entry_launched_as_the_client_would_answers_through_the_daemon() {
    let home = switchyard_testkit::daemon::Home::new();
    let project = home.path().join("work");
    let mcp = project.join(".mcp.json");
    std::fs::create_dir_all(&project).unwrap();
    let entry = serde_json::json!({"mcpServers": {
        "fix": {"type": "stdio", "command": bin(), "args": ["fixture", "--name", "${FIX_LABEL:-plain}"]},
    }});
    std::fs::write(&mcp, format!("{entry:#}\n")).unwrap();
    let config = home.config_str();
    ok(switchyard_in(&home, &project, &["wrap", ".mcp.json", "--config", &config]));
    let wrapped: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&mcp).unwrap()).unwrap();
    let fix = &wrapped["mcpServers"]["fix"];
    assert_eq!(fix["args"][0], "connect", "{fix}");
    // Claude Code expands `${VAR:-default}` in an entry's env from its own environment.
    let launch = |label: Option<&str>| {
        let mut argv = vec![fix["command"].as_str().unwrap().to_string()];
        argv.extend(fix["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()));
        let mut envs = home.envs();
        for (k, v) in fix["env"].as_object().unwrap() {
            let v = v.as_str().unwrap();
            let expanded = match (v, label) {
                ("${FIX_LABEL:-plain}", Some(l)) => l.to_string(),
                ("${FIX_LABEL:-plain}", None) => "plain".to_string(),
                (other, _) => panic!("unexpected env value {other}"),
            };
            envs.push((k.clone(), expanded));
        }
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Proc::spawn_env("wrapped entry", &argv, &envs)
    };
    let (mut a, mut b) = (launch(None), launch(Some("alpha")));
    let (mut ca, mut cb) = (a.client(), b.client());
    ca.initialize().await;
    cb.initialize().await;
    let (ta, tb) = (ca.call_text("pid", serde_json::json!({})).await, cb.call_text("pid", serde_json::json!({})).await);
    assert!(ta.contains("plain"), "{ta}");
    assert!(tb.contains("alpha"), "{tb}");
    assert_eq!(home.daemons().len(), 1, "{}", switchyard_testkit::daemon::render(&home.processes()));
    // Each variant's instances are told apart in the log: `[fix@1#1]`, `[fix@2#1]`.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !(home.logs().contains("[fix@1#1]") && home.logs().contains("[fix@2#1]")) {
        assert!(std::time::Instant::now() < deadline, "instances not labelled by variant:\n{}", home.logs());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // The daemon's own lines (a server's stderr, forwarded as `[label] ...`, is its own business:
    // this fixture names itself there).
    let logs: String = home.logs().lines().filter(|l| !l.starts_with('[')).collect::<Vec<_>>().join("\n");
    assert!(!logs.contains("alpha"), "a client's value reached the daemon's log:\n{logs}");
    ca.close().await;
    cb.close().await;
    a.wait().await;
    b.wait().await;
    home.stop().await;
}

/// A variable Codex forwards (`env_vars`) but that is unset where Codex runs: Codex starts the
/// server without it, and so does the wrapped entry, launched as Codex launches it.
#[tokio::test]
async fn a_codex_entry_whose_forwarded_variable_is_unset_still_starts() {
    const UNSET: &str = "SWITCHYARD_TEST_CODEX_UNSET_TOKEN";
    assert!(std::env::var_os(UNSET).is_none(), "{UNSET} is set in the test's environment");
    let home = switchyard_testkit::daemon::Home::new();
    let file = home.path().join(".codex/config.toml");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let text = format!(
        "[mcp_servers.fix]\ncommand = {}\nargs = [\"fixture\", \"--name\", \"fix-o\"]\nenv_vars = [\"{UNSET}\"]\n",
        serde_json::json!(bin())
    );
    std::fs::write(&file, text).unwrap();
    let config = home.config_str();
    let said = ok(switchyard_in(&home, home.path(), &["wrap", ".codex/config.toml", "--config", &config]));
    assert!(said.contains("note: Codex starts servers"), "{said}");
    let wrapped: toml::Table = std::fs::read_to_string(&file).unwrap().parse().unwrap();
    let fix = &wrapped["mcp_servers"]["fix"];
    let mut argv = vec![fix["command"].as_str().unwrap().to_string()];
    argv.extend(fix["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()));
    assert!(argv.contains(&format!("{UNSET}?")), "{argv:?}");
    // Codex forwards what of `env_vars` is set (here the home's XDG directories) and leaves the rest.
    let envs = home.envs();
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut entry = Proc::spawn_env("wrapped codex entry", &argv, &envs);
    let mut client = entry.client();
    client.initialize().await;
    let answer = client.call_text("pid", serde_json::json!({})).await;
    assert!(answer.contains("fix-o"), "{answer}");
    client.close().await;
    entry.wait().await;
    home.stop().await;
}

/// A switchyard.toml that is a link (dotfiles) stays a link: the servers go into the file it
/// points to, whose previous text is kept beside it; its own servers and comments stay.
#[test]
fn wrap_into_a_linked_switchyard_config_keeps_the_link_and_a_backup() {
    let home = switchyard_testkit::daemon::Home::new();
    place("claude_desktop_config.json", &home.path().join("config/Claude/claude_desktop_config.json"));
    let target = home.path().join("dotfiles/switchyard.toml");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    let mine = "# my servers\n[servers.notes]\ncommand = \"notes-server\" # by hand\n";
    std::fs::write(&target, mine).unwrap();
    let link = home.path().join("sy.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let text = ok(switchyard_in(&home, home.path(), &["wrap", "--client", "claude-desktop", "--config", "sy.toml"]));
    assert!(text.contains("switchyard.toml.switchyard-backup"), "{text}");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced by a file");
    let now = std::fs::read_to_string(&target).unwrap();
    assert!(now.starts_with(mine) && now.contains("[servers.filesystem]"), "{now}");
    assert_eq!(std::fs::read_to_string(home.path().join("dotfiles/switchyard.toml.switchyard-backup")).unwrap(), mine);
    // A link to a config not made yet: the file is made where the link points.
    let dangling = home.path().join("sy2.toml");
    std::os::unix::fs::symlink("dotfiles/new.toml", &dangling).unwrap();
    let cursor = home.path().join("c.json");
    std::fs::write(&cursor, "{\"mcpServers\": {\"n\": {\"command\": \"n\"}}}").unwrap();
    ok(switchyard_in(&home, home.path(), &["wrap", "c.json", "--client", "cursor", "--config", "sy2.toml"]));
    assert!(std::fs::symlink_metadata(&dangling).unwrap().file_type().is_symlink(), "the link was replaced");
    assert!(std::fs::read_to_string(home.path().join("dotfiles/new.toml")).unwrap().contains("[servers.n]"));
    // The wrapped entries name the config as given (absolute), so the link keeps serving.
    let desktop = std::fs::read_to_string(home.path().join("config/Claude/claude_desktop_config.json")).unwrap();
    assert!(desktop.contains(&format!("{}", link.display())), "{desktop}");
}

/// Six `wrap`s at once into one switchyard.toml, half of them with another runtime directory
/// (a shell without XDG_RUNTIME_DIR, cron): every server is in it afterwards (each wrap reads
/// the file the one before it wrote), and every client file names a server that exists.
#[test]
fn wraps_at_once_lose_no_server() {
    let home = switchyard_testkit::daemon::Home::new();
    let config = home.config_str();
    let other_run = home.path().join("run2");
    std::fs::create_dir(&other_run).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&other_run, std::fs::Permissions::from_mode(0o700)).unwrap();
    let files: Vec<std::path::PathBuf> = (0..6)
        .map(|i| {
            let f = home.path().join(format!("c{i}/mcp.json"));
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(&f, format!("{{\"mcpServers\": {{\"s{i}\": {{\"command\": \"srv{i}\"}}}}}}\n")).unwrap();
            f
        })
        .collect();
    let children: Vec<std::process::Child> = files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut envs = home.envs();
            if i % 2 == 1 {
                envs.push(("XDG_RUNTIME_DIR".into(), other_run.display().to_string()));
            }
            std::process::Command::new(bin())
                .args(["wrap", f.to_str().unwrap(), "--client", "cursor", "--config", &config])
                .envs(envs)
                .env("SWITCHYARD_STABLE_BIN", bin())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let toml = std::fs::read_to_string(&home.config).unwrap();
    for (i, file) in files.iter().enumerate() {
        assert!(toml.contains(&format!("[servers.s{i}]")), "s{i} lost:\n{toml}");
        let wrapped = std::fs::read_to_string(file).unwrap();
        assert!(wrapped.contains("\"connect\""), "{wrapped}");
    }
}

/// switchyard installed under another name (a copy called `sy`): wrap writes that binary's path
/// into the entries and knows them as its own afterwards (`clients` says so, a second wrap
/// changes nothing, unwrap puts the file back).
#[test]
fn wrap_works_when_the_binary_has_another_name() {
    let home = switchyard_testkit::daemon::Home::new();
    let sy = home.path().join("bin/sy");
    std::fs::create_dir_all(sy.parent().unwrap()).unwrap();
    // A hard link, not a copy: a copy is written through a file descriptor that a child forked
    // meanwhile by another test inherits, and exec of a file open for writing fails (ETXTBSY).
    if std::fs::hard_link(bin(), &sy).is_err() {
        std::fs::copy(bin(), &sy).unwrap();
    }
    let file = home.path().join(".cursor/mcp.json");
    place("cursor.mcp.json", &file);
    let original = std::fs::read(&file).unwrap();
    let config = home.config_str();
    let sy_run = |args: &[&str]| {
        let mut tries = 0;
        loop {
            let run = std::process::Command::new(&sy)
                .args(args)
                .current_dir(home.path())
                .envs(home.envs())
                .stdin(std::process::Stdio::null())
                .output();
            match run {
                // The copy's descriptor lives on in a child forked meanwhile until it execs.
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                run => break ok(run.unwrap()),
            }
        }
    };
    let said = sy_run(&["wrap", "--client", "cursor", "--config", &config]);
    assert!(said.contains("wrote "), "{said}");
    let wrapped = std::fs::read_to_string(&file).unwrap();
    assert!(wrapped.contains(&format!("\"command\": \"{}\"", sy.display())), "{wrapped}");
    assert!(sy_run(&["clients"]).contains("through switchyard (server `remote-server`)"));
    assert!(sy_run(&["wrap", "--client", "cursor", "--config", &config]).contains("nothing to wrap"));
    sy_run(&["unwrap", "--client", "cursor"]);
    assert_eq!(std::fs::read(&file).unwrap(), original);
}

/// A project's `.mcp.json` committed to its repository: `wrap` leaves it (its wrapped entries
/// would carry this machine's paths to everyone), says why, and with `--include-tracked` wraps it
/// without leaving a file in the repository; `unwrap` gives the repository back clean.
#[test]
fn a_file_git_tracks_is_left_unless_asked_and_no_backup_lands_in_the_repository() {
    let home = switchyard_testkit::daemon::Home::new();
    let repo = home.path().join("repo");
    place("project.mcp.json", &repo.join(".mcp.json"));
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
            .args(args)
            .current_dir(&repo)
            .output()
            .expect("git runs");
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    git(&["init", "-q"]);
    git(&["add", ".mcp.json"]);
    git(&["commit", "-q", "-m", "servers"]);
    let original = std::fs::read(repo.join(".mcp.json")).unwrap();
    let text = ok(switchyard_in(&home, &repo, &["wrap", "--client", "claude-code"]));
    assert!(text.contains("tracked by git") && text.contains("--include-tracked"), "{text}");
    assert_eq!(std::fs::read(repo.join(".mcp.json")).unwrap(), original, "a tracked file was wrapped");
    assert_eq!(git(&["status", "--porcelain"]), "", "the repository changed");

    let text = ok(switchyard_in(&home, &repo, &["wrap", "--client", "claude-code", "--include-tracked"]));
    assert!(text.contains("wrote "), "{text}");
    assert_eq!(git(&["status", "--porcelain"]).trim(), "M .mcp.json", "only the file itself changes in the repository");
    ok(switchyard_in(&home, &repo, &["unwrap", "--client", "claude-code"]));
    assert_eq!(std::fs::read(repo.join(".mcp.json")).unwrap(), original);
    assert_eq!(git(&["status", "--porcelain"]), "", "the repository is not clean after unwrap");
}

/// Run from cargo's build directory, `wrap` writes no entry that the next build would replace:
/// with no other switchyard on PATH it says so and what to do, writing nothing; with one there
/// (an installed copy), the entries run that one.
#[test]
fn wrap_from_a_build_directory_writes_the_switchyard_on_path_or_nothing() {
    let home = switchyard_testkit::daemon::Home::new();
    let file = home.path().join(".cursor/mcp.json");
    place("cursor.mcp.json", &file);
    let original = std::fs::read(&file).unwrap();
    let config = home.config_str();
    let wrap = |path: &Path| {
        std::process::Command::new(bin())
            .args(["wrap", "--client", "cursor", "--config", &config])
            .current_dir(home.path())
            .envs(home.envs())
            .env("PATH", path)
            .env_remove("SWITCHYARD_STABLE_BIN")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    // The build directory on PATH counts for nothing.
    let out = wrap(Path::new(bin()).parent().unwrap());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("a cargo build directory") && said.contains("run `switchyard wrap` again"), "{said}");
    assert_eq!(std::fs::read(&file).unwrap(), original, "wrap wrote though it refused");
    assert!(!home.config.exists());

    let installed = home.path().join("bin/switchyard");
    std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
    // A link, not a copy (see `wrap_works_when_the_binary_has_another_name`).
    if std::fs::hard_link(bin(), &installed).is_err() {
        std::fs::copy(bin(), &installed).unwrap();
    }
    let said = ok(wrap(installed.parent().unwrap()));
    assert!(said.contains("the switchyard on PATH"), "{said}");
    let wrapped = std::fs::read_to_string(&file).unwrap();
    assert!(wrapped.contains(&format!("\"command\": \"{}\"", installed.display())), "{wrapped}");
}
