//! `switchyard calls`: the audit log read back, as a table or one JSON record a line, filtered
//! by server, tool, client, time and outcome, and followed as calls come in (`--follow`).

mod read;
mod show;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, bail};

use switchyard_config::{Config, paths};
use switchyard_core::audit::{Record, time};

pub(crate) use read::Log;

#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct CallsArgs {
    /// The daemon's config file: its [audit] log [default: every audit log in the state
    /// directory, the daemons' and `switchyard run`'s].
    #[arg(long, value_name = "FILE", conflicts_with = "file")]
    pub(crate) config: Option<PathBuf>,
    /// An audit log file (with its rotated PATH.1, PATH.2, ...).
    #[arg(long, value_name = "PATH")]
    pub(crate) file: Vec<PathBuf>,
    /// Only calls to this server.
    #[arg(long, value_name = "NAME")]
    pub(crate) server: Option<String>,
    /// Only calls of this tool.
    #[arg(long, value_name = "NAME")]
    pub(crate) tool: Option<String>,
    /// Only calls of this client: its name (any part, any case), its session (`unix-4`) or
    /// the name of its [http.tokens] entry.
    #[arg(long, value_name = "NAME")]
    pub(crate) client: Option<String>,
    /// Only calls that ended this recently (`30s`, `10m`, `2h`, `1d`) or since this time (RFC
    /// 3339: `2026-11-29T14:00:00Z`, or a date).
    #[arg(long, value_name = "WHEN", value_parser = parse_since)]
    pub(crate) since: Option<SystemTime>,
    /// Only calls that did not succeed (errors, tool errors, refusals, timeouts, cancelled and
    /// lost calls).
    #[arg(long)]
    pub(crate) failed: bool,
    /// Keep printing calls as they are logged, until interrupted.
    #[arg(long)]
    pub(crate) follow: bool,
    /// One JSON record a line, as the log has it.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--since`: an age back from now, or a time.
fn parse_since(text: &str) -> Result<SystemTime, String> {
    let t = text.trim();
    if let Some(at) = time::parse_rfc3339(t) {
        return Ok(at);
    }
    let digits = t.bytes().take_while(u8::is_ascii_digit).count();
    let (n, unit) = t.split_at(digits);
    let n: u64 = n.parse().map_err(|_| bad_since(t))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(bad_since(t)),
    };
    Ok(SystemTime::now().checked_sub(Duration::from_secs(secs)).unwrap_or(SystemTime::UNIX_EPOCH))
}

fn bad_since(t: &str) -> String {
    format!("`{t}` is neither an age (30s, 10m, 2h, 1d) nor an RFC 3339 time (2026-11-29T14:00:00Z)")
}

/// Which records are shown.
pub(crate) struct Filter {
    server: Option<String>,
    tool: Option<String>,
    client: Option<String>,
    /// RFC 3339 in the log's own form, which orders as text.
    since: Option<String>,
    failed: bool,
}

impl Filter {
    fn of(args: &CallsArgs) -> Filter {
        Filter {
            server: args.server.clone(),
            tool: args.tool.clone(),
            client: args.client.as_ref().map(|c| c.to_lowercase()),
            since: args.since.map(time::rfc3339),
            failed: args.failed,
        }
    }

    pub(crate) fn keeps(&self, r: &Record) -> bool {
        let client = |c: &str| {
            r.client.name.as_ref().is_some_and(|n| n.to_lowercase().contains(c))
                || r.session.eq_ignore_ascii_case(c)
                || r.client.credential.as_ref().is_some_and(|n| n.eq_ignore_ascii_case(c))
        };
        self.server.as_ref().is_none_or(|s| *r.server == **s || r.client.profile.as_ref() == Some(s))
            && self.tool.as_deref().is_none_or(|t| r.tool.as_deref() == Some(t))
            && self.client.as_deref().is_none_or(client)
            && self.since.as_ref().is_none_or(|s| r.time.as_str() >= s.as_str())
            && (!self.failed || r.outcome.failed())
    }
}

/// `switchyard calls`.
pub(crate) fn calls_blocking(args: CallsArgs) -> anyhow::Result<()> {
    let (logs, dir) = logs(&args)?;
    let filter = Filter::of(&args);
    let keep = |r: &Record| filter.keeps(r);
    let mut out = show::Out::new(std::io::stdout().lock(), args.json);
    let mut followed = Vec::new();
    let mut records = Vec::new();
    for path in &logs {
        let mut log = Log::new(path, &keep);
        records.extend(log.read_all()?);
        tell(&mut log);
        followed.push(log);
    }
    // Several logs (daemons, runs) merge by time; one log is in order already.
    if logs.len() > 1 {
        records.sort_by(|a, b| a.0.time.cmp(&b.0.time));
    }
    for (record, line) in &records {
        if !out.record(record, line) {
            return Ok(());
        }
    }
    drop(records);
    if !args.follow {
        if !out.shown() && !args.json {
            let _ = writeln!(std::io::stderr(), "no calls match (read {})", shown_paths(&logs));
        }
        return Ok(());
    }
    if let (true, Some(dir)) = (logs.is_empty(), &dir) {
        let _ = writeln!(std::io::stderr(), "no audit log in {} yet; waiting for the first call", dir.display());
    }
    out.flush();
    let mut scanned = std::time::Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(250));
        // Logs begun since (a daemon of another config, a new `switchyard run`) are followed
        // from their start.
        if let Some(dir) = &dir
            && scanned.elapsed() >= RESCAN
        {
            scanned = std::time::Instant::now();
            add_new(dir, &mut followed, &keep);
        }
        for log in followed.iter_mut() {
            let lines = log.read_new()?;
            tell(log);
            for (record, line) in lines {
                if !out.record(&record, &line) {
                    return Ok(());
                }
            }
        }
        if !out.flush() {
            return Ok(());
        }
    }
}

/// Says which lines of `log` were skipped, on stderr.
fn tell(log: &mut Log<'_>) {
    let mut err = std::io::stderr().lock();
    for note in log.notes() {
        let _ = writeln!(err, "{note}");
    }
}

/// How often `--follow` looks for new audit logs in the state directory.
const RESCAN: Duration = Duration::from_secs(1);

/// Adds to `followed` the audit logs in `dir` that it does not have yet.
fn add_new<'f>(dir: &Path, followed: &mut Vec<Log<'f>>, keep: &'f dyn Fn(&Record) -> bool) {
    for path in in_dir(dir) {
        if !followed.iter().any(|log| log.path() == path) {
            followed.push(Log::new(&path, keep));
        }
    }
}

fn shown_paths(logs: &[PathBuf]) -> String {
    logs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// The audit logs to read: those named, the one of `--config`, or every one in the state
/// directory (and the default config's own, when its [audit] path is elsewhere), with that
/// directory then. An error says why there is none: audit is off, or no call was logged yet
/// (unless `--follow` waits for one).
fn logs(args: &CallsArgs) -> anyhow::Result<(Vec<PathBuf>, Option<PathBuf>)> {
    if !args.file.is_empty() {
        for f in &args.file {
            if !f.exists() && !args.follow {
                bail!("there is no audit log {}", f.display());
            }
        }
        return Ok((args.file.clone(), None));
    }
    if let Some(config) = &args.config {
        let (path, enabled) = of_config(config)?;
        if !enabled {
            bail!(
                "the audit log is off for {}: [audit] enabled = false; remove that line (the daemon reads it when it starts) to log calls",
                config.display()
            );
        }
        if !path.exists() && !args.follow {
            bail!(
                "no call was logged yet for {}: its audit log {} does not exist (a daemon writes it from the first call it serves)",
                config.display(),
                path.display()
            );
        }
        return Ok((vec![path], None));
    }
    let dir = paths::state_dir_path()?;
    let mut found = in_dir(&dir);
    let default = paths::default_config().ok().filter(|c| c.exists());
    let own = default.as_deref().map(of_config).transpose().ok().flatten();
    if let Some((path, true)) = &own
        && !found.contains(path)
        && path.exists()
    {
        found.push(path.clone());
    }
    if found.is_empty() && !args.follow {
        match (&own, default) {
            (Some((_, false)), Some(config)) => bail!(
                "no audit log in {}: the audit log is off in {} ([audit] enabled = false)",
                dir.display(),
                config.display()
            ),
            _ => bail!(
                "no audit log in {}: no call went through a switchyard daemon or `switchyard run` yet (or their [audit] path is elsewhere: name it with --file, or its config with --config)",
                dir.display()
            ),
        }
    }
    found.sort();
    Ok((found, Some(dir)))
}

/// The audit log of the config file `config` and whether it is on: its `[audit]` table decides,
/// so a mistake elsewhere in the file (a misspelt server in `[groups]`) is a warning, not a
/// reason to show no calls.
fn of_config(config: &Path) -> anyhow::Result<(PathBuf, bool)> {
    let canonical = paths::canonical_config(config)?;
    let context = || format!("cannot read {} to find its audit log; name the log with --file", config.display());
    let text = std::fs::read_to_string(&canonical).with_context(context)?;
    let read = Config::load_for(&canonical, &text, &["audit"]).with_context(context)?;
    if let Some(why) = &read.elsewhere {
        let _ = writeln!(
            std::io::stderr(),
            "warning: {why}\n(the audit log is found from its [audit] table, which loads; `switchyard check` shows what to fix)"
        );
    }
    let loaded = read.config;
    let path = match &loaded.audit.path {
        Some(p) => p.clone(),
        None => paths::audit_for(&canonical)?,
    };
    Ok((path, loaded.audit.enabled))
}

/// The current audit logs in `dir` (`*.audit.jsonl`, without their rotated files).
fn in_dir(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(paths::AUDIT_SUFFIX)))
        .collect()
}

#[cfg(test)]
mod tests;
