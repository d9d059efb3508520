//! What is wrong with a config's plugins, for `switchyard status` and `switchyard check`: each
//! plugin that is broken or not applied, in one sentence, and what that does to calls.

use std::fmt;
use std::path::{Path, PathBuf};

use switchyard_config::Config;

use super::loader::{Loader, servers_text};

/// What a plugin's problem does to the calls it would judge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// They are refused, with the sentence as the reason: the plugin must run (its entry is
    /// `required`, or says `on_error = "closed"`) and no version of it has loaded.
    Refuses,
    /// The last version that loaded stays in force, with the entry it was loaded with: a newer
    /// file or a changed entry (a config its `init` refuses) did not load, or the file of a
    /// required plugin was deleted.
    KeptLastGood,
    /// They run without it: a file without a `[[plugins]]` entry, or a broken one whose entry
    /// lets it be left out (`required = false`, `on_error = "open"`).
    NotApplied,
}

/// One plugin that is broken or not applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The plugin's file, as its entry names it (or as it is named in the directory).
    pub plugin: String,
    pub effect: Effect,
    /// One line: the file, what is wrong, the fix (never the file's bytes).
    pub sentence: String,
    /// The whole error, as the log has it (None when the sentence is all there is).
    pub detail: Option<String>,
    /// The servers its entry names (None: every server, or no entry).
    pub servers: Option<Vec<String>>,
}

impl fmt::Display for Problem {
    /// The sentence and what it does to calls, on one line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.effect {
            Effect::Refuses => write!(
                f,
                "{}; the calls it judges {} are refused until it loads",
                self.sentence,
                servers_text(self.servers.as_deref())
            ),
            Effect::KeptLastGood => write!(f, "{}; the last version that loaded stays in force", self.sentence),
            Effect::NotApplied => write!(f, "{}; calls go on without it", self.sentence),
        }
    }
}

/// What loading a config's plugins found.
#[derive(Debug, Clone)]
pub struct Findings {
    /// The plugins directory.
    pub dir: PathBuf,
    /// The plugins that load with their entries, by file.
    pub applied: Vec<String>,
    /// Every plugin that is broken or not applied, by file.
    pub problems: Vec<Problem>,
}

/// Loads the plugins `config` names and looks at every file of its plugins directory
/// (`cli_dir`, else `plugins/` beside the config file, else the default) as a router starting
/// on it would: the same code, each entry's config and limits, `init` run. Nothing is watched,
/// the directory is not created, and nothing is logged (the findings say what a router would).
/// Blocking (it compiles): not on an async runtime thread.
pub fn check(config: &Config, cli_dir: Option<&Path>) -> anyhow::Result<Findings> {
    let (dir, _) = super::reload::pick_dir(config, cli_dir.map(Path::to_path_buf))?;
    let mut loader = Loader::new(dir.clone(), config.plugins.clone());
    let scan = tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || loader.scan());
    Ok(Findings { dir, applied: loader.applied(), problems: scan.problems })
}
