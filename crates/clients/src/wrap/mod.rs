//! `switchyard wrap` and `unwrap`: every server of a client's config moved behind switchyard in
//! one step, and back.
//!
//! `wrap` replaces the text of each server entry (and nothing else: other keys, their order,
//! comments and spacing stay byte for byte) with a stdio entry that runs `switchyard connect
//! NAME --config FILE`, and appends the server's definition to switchyard.toml as
//! `[servers.NAME]`. What the client alone can resolve (`${input:key}`, `${workspaceFolder}`,
//! Claude Code's `${VAR}`) stays in the client's file, in the wrapped entry's `env`, and reaches
//! the server through `connect --env` (the server's `client_env`). Each replaced entry's text is
//! recorded, so `unwrap` puts it back exactly: the file comes back byte for byte when nothing
//! else changed, and with the other changes kept when something did.
//!
//! Planning is pure (text in, text out) so every case is tested without a file system; [`wrap`]
//! writes: switchyard.toml first (a client restarted meanwhile finds its servers there), then each
//! client file, each atomically (a temporary file renamed over it) after a backup beside it.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow, bail};

use super::{Client, Location, Scope};

mod backups;
mod emit;
mod group;
mod plan;
mod records;
mod report;
mod stable;

pub use backups::Backups;
pub use group::{plan_unwrap_groups, plan_wrap_group};
pub use plan::{Change, Plan, plan_unwrap, plan_wrap};
pub use records::{GroupRecord, Record, State, backup_beside, sha256, tracked_by_git};
pub use report::diff;

use records::{
    lock_dir, read_state, real_path, records_dir, records_locked, replace_file, write_client_file, write_state,
};
use report::dry_run;

/// What `wrap` and `unwrap` act on: the files of one client, or one file.
#[derive(Debug, Clone)]
pub struct Options {
    pub client: Option<Client>,
    pub path: Option<PathBuf>,
    pub project: Option<PathBuf>,
    /// The switchyard config that receives the servers (`wrap`); default the user's.
    pub config: Option<PathBuf>,
    /// Only these entries (by their name in the client's file).
    pub only: Option<Vec<String>>,
    pub dry_run: bool,
    /// Wrap files that git tracks too (`wrap` leaves them by default).
    pub include_tracked: bool,
    /// `wrap --group NAME`: one entry running `switchyard connect --group NAME` in place of the
    /// group's servers.
    pub group: Option<String>,
}

/// One client file to work on, with its text as read.
#[derive(Debug, Clone)]
pub struct Input {
    pub client: Client,
    pub path: PathBuf,
    pub scope: Scope,
    pub text: String,
}

/// `~/x` as a shell would have expanded it (`--config=~/x` reaches switchyard as written).
fn tilde(path: &Path, home: &Path) -> PathBuf {
    match path.strip_prefix("~") {
        Ok(rest) => home.join(rest),
        Err(_) => path.to_path_buf(),
    }
}

/// Whether a path names something, a dangling or looping link included (reading it then says
/// what is wrong).
fn exists_even_dangling(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// The files `opts` names: PATH (its client from `--client` or from where it is), or every file
/// of `--client` that exists here.
pub fn select(opts: &Options, home: &Path, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Vec<Location>> {
    let project = match &opts.project {
        Some(p) => {
            let p = tilde(p, home);
            if !p.is_dir() {
                bail!("--project {}: no such directory", p.display());
            }
            Some(p)
        }
        None => std::env::current_dir().ok(),
    };
    if let Some(path) = &opts.path {
        let path = tilde(path, home);
        // A place a client keeps its file (`$CODEX_HOME/config.toml` too), else its name.
        let absolute = |p: &Path| std::path::absolute(p).ok();
        let guessed = super::locations(home, project.as_deref(), env)
            .into_iter()
            .find(|l| absolute(&l.path) == absolute(&path) && opts.client.is_none_or(|c| c == l.client))
            .or_else(|| guess_client(&path, home));
        let client = opts.client.or(guessed.as_ref().map(|l| l.client)).ok_or_else(|| {
            anyhow!(
                "cannot tell which client reads {}; say it with --client (claude-desktop, claude-code, cursor, vscode, codex, gemini)",
                path.display()
            )
        })?;
        let scope = match &guessed {
            Some(l) if l.client == client => l.scope.clone(),
            _ => Scope::Project,
        };
        if !exists_even_dangling(&path) {
            bail!("{}: no such file", path.display());
        }
        return Ok(vec![Location { client, path, scope }]);
    }
    let Some(client) = opts.client else {
        bail!(
            "name a client (--client claude-desktop|claude-code|cursor|vscode|codex|gemini) or a file; `switchyard clients` lists them"
        );
    };
    let all: Vec<Location> =
        super::locations(home, project.as_deref(), env).into_iter().filter(|l| l.client == client).collect();
    let here: Vec<Location> = all.iter().filter(|l| exists_even_dangling(&l.path)).cloned().collect();
    if here.is_empty() {
        let looked: Vec<String> = all.iter().map(|l| l.path.display().to_string()).collect();
        bail!("no {} config found; looked at: {}", client.name(), looked.join(", "));
    }
    Ok(here)
}

/// Which client reads `path`, from its name and place.
fn guess_client(path: &Path, home: &Path) -> Option<Location> {
    let name = path.file_name()?.to_str()?;
    let parent = path.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("");
    let (client, scope) = match name {
        "claude_desktop_config.json" => (Client::ClaudeDesktop, Scope::User),
        ".claude.json" => (Client::ClaudeCode, Scope::User),
        ".mcp.json" => (Client::ClaudeCode, Scope::Project),
        "mcp.json" if parent == ".cursor" => {
            let user = std::path::absolute(path).ok()? == std::path::absolute(home.join(".cursor/mcp.json")).ok()?;
            (Client::Cursor, if user { Scope::User } else { Scope::Project })
        }
        "mcp.json" if parent == ".vscode" => (Client::VsCode, Scope::Project),
        "config.toml" if parent == ".codex" => {
            (Client::Codex, user_or_project(path, &home.join(".codex/config.toml"))?)
        }
        "settings.json" if parent == ".gemini" => {
            (Client::Gemini, user_or_project(path, &home.join(".gemini/settings.json"))?)
        }
        "mcp.json" if parent == "User" && path.parent()?.parent()?.file_name()? == "Code" => {
            (Client::VsCode, Scope::User)
        }
        _ => return None,
    };
    Some(Location { client, path: path.to_path_buf(), scope })
}

/// The user's scope when `path` is `user` (the file in the home directory), else a project's.
fn user_or_project(path: &Path, user: &Path) -> Option<Scope> {
    let same = std::path::absolute(path).ok()? == std::path::absolute(user).ok()?;
    Some(if same { Scope::User } else { Scope::Project })
}

/// The files' texts. A file that cannot be read or written is left out, said in `lines`; when
/// it is the only file, that is the error.
fn read_inputs(locations: &[Location], lines: &mut Vec<String>) -> anyhow::Result<Vec<Input>> {
    let mut out = Vec::new();
    for l in locations {
        let read = std::fs::read_to_string(&l.path)
            .map_err(|e| format!("cannot read {}: {e}", l.path.display()))
            .and_then(|text| writable(&l.path).map(|()| text));
        match read {
            Ok(text) => out.push(Input { client: l.client, path: l.path.clone(), scope: l.scope.clone(), text }),
            Err(e) if locations.len() == 1 => bail!("{e}"),
            Err(e) => lines.push(format!("left as it is: {e}")),
        }
    }
    Ok(out)
}

/// Whether this user may replace `path` (a link's target) as `wrap` does: write the file, and
/// make and rename files in its directory.
fn writable(path: &Path) -> Result<(), String> {
    let real = real_path(path);
    let dir = real.parent().unwrap_or(Path::new("/"));
    if !switchyard_os::fs::may_write(&real) {
        return Err(format!(
            "{} is read-only for you; switchyard changes only files you may write (make it writable to wrap it)",
            path.display()
        ));
    }
    if !switchyard_os::fs::may_write(dir) {
        return Err(format!(
            "{} is in a directory you may not write ({}); switchyard replaces a file through a new one beside it",
            path.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// An error of a write, with what was written before it.
fn after_writes(e: anyhow::Error, written: &[String]) -> anyhow::Error {
    if written.is_empty() {
        e
    } else {
        anyhow!(
            "{e:#}. Already written before this: {} (a file that existed has its backup beside it; `switchyard unwrap` puts client entries back)",
            written.join(", ")
        )
    }
}

/// `switchyard wrap`: returns what to print.
pub fn wrap(opts: &Options) -> anyhow::Result<String> {
    let home = crate::home()?;
    let env = |k: &str| std::env::var(k).ok();
    let config = match &opts.config {
        Some(c) => {
            let c = tilde(c, &home);
            std::path::absolute(&c).with_context(|| format!("{}: not a usable path", c.display()))?
        }
        None => switchyard_config::paths::default_config()?,
    };
    // Locks before anything is read: what is read is what is written to.
    let _locks = if opts.dry_run {
        None
    } else {
        let dir = real_path(&config).parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
        Some((lock_dir(&dir)?, records_locked()?))
    };
    let mut locations = select(opts, &home, &env)?;
    let mut lines = Vec::new();
    if let Some(group) = &opts.group {
        group_locations(opts, group, &mut locations)?;
    }
    if !opts.include_tracked {
        locations.retain(|l| match records::tracked_by_git(&l.path) {
            Some(repo) => {
                lines.push(format!(
                    "{}: tracked by git (the repository at {}): wrapped, its entries would hold this machine's paths for everyone who shares the repository; left as it is (--include-tracked wraps it anyway, or wrap your user-level file)",
                    l.path.display(),
                    repo.display()
                ));
                false
            }
            None => true,
        });
    }
    let inputs = read_inputs(&locations, &mut lines)?;
    let config_text = match std::fs::read_to_string(&config) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", config.display())),
    };
    let exe =
        std::env::current_exe().context("cannot tell where the switchyard binary is, which the wrapped entries run")?;
    let (exe, note) = stable::switchyard(&exe, &env)?;
    lines.extend(note);
    let plan = match (&opts.group, inputs.as_slice()) {
        (Some(group), [input]) => plan_wrap_group(input, &config, config_text.as_deref(), &exe, group)?,
        (Some(_), _) => Plan { lines: vec!["nothing to wrap".into()], ..Plan::default() },
        (None, _) => plan_wrap(&inputs, &config, config_text.as_deref(), &exe, opts.only.as_deref())?,
    };
    let mut out = String::new();
    for line in lines.iter().chain(&plan.lines) {
        let _ = writeln!(out, "{line}");
    }
    if opts.dry_run {
        out.push_str(&dry_run(plan.config.as_ref(), &plan.changes));
        return Ok(out);
    }
    let mut written: Vec<String> = Vec::new();
    if let Some((path, before, after)) = &plan.config {
        // Its directory exists: the lock on it made it.
        let now = std::fs::read_to_string(path).ok();
        if now != *before {
            bail!(
                "{} changed while switchyard was working on it; nothing was written: run the command again",
                path.display()
            );
        }
        // A linked config (dotfiles) stays a link: its target is written.
        let real = real_path(path);
        let backup = match before {
            Some(before) => {
                let backup = backup_beside(&real);
                replace_file(&backup, before.as_bytes(), Some(0o600))?;
                format!(" (the file as it was is in {})", backup.display())
            }
            None => String::new(),
        };
        // It may hold a server's env values and headers: only its user reads a new one.
        replace_file(&real, after.as_bytes(), Some(0o600))?;
        written.push(path.display().to_string());
        let _ = writeln!(out, "\nadded the servers to {}{backup}", path.display());
        let added = &after[before.as_deref().map_or(0, str::len)..];
        let open = std::fs::metadata(path).map(|m| switchyard_os::fs::open_to_others(&m));
        if open.unwrap_or(false) && (added.contains("\nenv = ") || added.contains("\nheaders = ")) {
            let _ = writeln!(
                out,
                "note: {} is readable by other users and now holds servers' env or header values (API keys, often): `chmod 600 {}`",
                path.display(),
                path.display()
            );
        }
    }
    for change in &plan.changes {
        let real = real_path(&change.path);
        let mut state = read_state(&real).map_err(|e| after_writes(e, &written))?.unwrap_or_else(|| State {
            file: real.clone(),
            client: change.client.name().to_string(),
            ..State::default()
        });
        let backup = write_client_file(change).map_err(|e| after_writes(e, &written))?;
        written.push(change.path.display().to_string());
        state.written = sha256(&change.after);
        state.entries.retain(|r| !change.records.iter().any(|n| n.name == r.name && n.project == r.project));
        state.entries.extend(change.records.iter().cloned());
        state.groups.retain(|g| !change.groups.iter().any(|n| n.name == g.name));
        state.groups.extend(change.groups.iter().cloned());
        write_state(&real, &state).map_err(|e| after_writes(e, &written))?;
        let _ = writeln!(
            out,
            "wrote {} ({} server(s) wrapped; the file as it was is in {})",
            change.path.display(),
            change.records.len() + change.groups.iter().map(|g| g.removed.len()).sum::<usize>(),
            backup.display()
        );
    }
    if !plan.changes.is_empty() {
        let _ = writeln!(
            out,
            "\nRestart the client (or reload its MCP servers) to use them. `switchyard unwrap` puts the entries back."
        );
    }
    Ok(out)
}

/// `unwrap` of one file: its entries wrapped one by one, then its group entries. Returns the
/// change, and the records of either kind that stay.
fn plan_unwrap_file(
    input: &Input,
    state: &State,
    only: Option<&[String]>,
    lines: &mut Vec<String>,
) -> anyhow::Result<(Option<Change>, Vec<Record>, Vec<GroupRecord>)> {
    let (change, keep) = plan_unwrap(input, state, only, lines)?;
    let text = change.as_ref().map_or(&input.text, |c| &c.after);
    let (text, groups, keep_groups) = plan_unwrap_groups(input, text, state, only, lines)?;
    let change = match (change, text) {
        (change, None) => change,
        (change, Some(after)) => Some(Change {
            after,
            groups,
            ..change.unwrap_or_else(|| Change {
                client: input.client,
                path: input.path.clone(),
                before: input.text.clone(),
                after: String::new(),
                records: Vec::new(),
                groups: Vec::new(),
            })
        }),
    };
    Ok((change, keep, keep_groups))
}

/// The file `wrap --group` works on: one server map gets the group's entry, so one file; with
/// `--client`, the user's (a project's file is named as FILE).
fn group_locations(opts: &Options, group: &str, locations: &mut Vec<Location>) -> anyhow::Result<()> {
    if opts.only.is_some() {
        bail!(
            "--only does not go with --group: the group's `servers` in switchyard's config say which servers it carries"
        );
    }
    if opts.path.is_none() {
        locations.retain(|l| l.scope == Scope::User);
    }
    match locations.as_slice() {
        [_] => Ok(()),
        [] => bail!("no user-level config of this client found; name the file: switchyard wrap FILE --group {group}"),
        many => {
            let paths: Vec<String> = many.iter().map(|l| l.path.display().to_string()).collect();
            bail!("wrap --group changes one file; name one of: {}", paths.join(", "))
        }
    }
}

/// `switchyard unwrap`: returns what to print.
pub fn unwrap(opts: &Options) -> anyhow::Result<String> {
    let home = crate::home()?;
    let env = |k: &str| std::env::var(k).ok();
    let _lock = if opts.dry_run { None } else { Some(records_locked()?) };
    // `unwrap --group NAME`: that group's entry alone.
    let flag = if opts.only.is_none() && opts.group.is_some() { "--group" } else { "--only" };
    let opts = &Options { only: opts.only.clone().or_else(|| opts.group.clone().map(|g| vec![g])), ..opts.clone() };
    let locations = select(opts, &home, &env)?;
    let mut lines = Vec::new();
    let inputs = read_inputs(&locations, &mut lines)?;
    let mut out = String::new();
    let mut planned = Vec::new();
    let mut recorded: BTreeSet<String> = BTreeSet::new();
    for input in &inputs {
        let real = real_path(&input.path);
        let Some(state) = read_state(&real)? else {
            let backup = match Backups::of(&real)?.newest() {
                Some(b) => format!("; {} holds its text before switchyard's last write to it", b.display()),
                None => String::new(),
            };
            lines.push(format!(
                "{}: no record of a switchyard wrap of it (records are in {}): left as it is{backup}",
                input.path.display(),
                records_dir().map(|d| d.display().to_string()).unwrap_or_default()
            ));
            continue;
        };
        recorded.extend(state.entries.iter().map(|r| r.name.clone()));
        recorded.extend(state.groups.iter().map(|g| g.name.clone()));
        let unwrapped = plan_unwrap_file(input, &state, opts.only.as_deref(), &mut lines);
        let (change, keep, keep_groups) = match unwrapped {
            Ok(planned) => planned,
            Err(e) if inputs.len() == 1 => return Err(e),
            Err(e) => {
                lines.push(format!("left as it is: {e:#}"));
                continue;
            }
        };
        planned.push((real, state, change, keep, keep_groups));
    }
    if let Some(only) = &opts.only {
        let missing: Vec<&str> = only.iter().filter(|n| !recorded.contains(*n)).map(String::as_str).collect();
        if !missing.is_empty() {
            bail!("{flag} names {} that switchyard wrap has no record of in these files", missing.join(", "));
        }
    }
    for line in &lines {
        let _ = writeln!(out, "{line}");
    }
    if opts.dry_run {
        let changes: Vec<Change> = planned.iter().filter_map(|(_, _, c, _, _)| c.clone()).collect();
        out.push_str(&dry_run(None, &changes));
        return Ok(out);
    }
    let mut written: Vec<String> = Vec::new();
    for (real, mut state, change, keep, keep_groups) in planned {
        if let Some(change) = &change {
            let backup = write_client_file(change).map_err(|e| after_writes(e, &written))?;
            written.push(change.path.display().to_string());
            state.written = sha256(&change.after);
            let n = change.records.len() + change.groups.iter().map(|g| g.removed.len()).sum::<usize>();
            // The wrapped text's backup is not the user's original: say where that one is.
            let first = match Backups::of(&real).ok().and_then(|b| b.first()).filter(|f| *f != backup) {
                Some(f) => format!("; as it was before switchyard first wrote it, in {}", f.display()),
                None => String::new(),
            };
            let _ = writeln!(
                out,
                "wrote {} ({n} entr{} put back; the file as it was is in {}{first})",
                change.path.display(),
                if n == 1 { "y" } else { "ies" },
                backup.display()
            );
        }
        state.entries = keep;
        state.groups = keep_groups;
        write_state(&real, &state).map_err(|e| after_writes(e, &written))?;
    }
    if !written.is_empty() {
        let _ = writeln!(
            out,
            "\nThe servers stay in switchyard's config (another client may use them); restart the client to use the entries as they were."
        );
    } else {
        let _ = writeln!(out, "nothing to unwrap");
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
