//! Why a plugin file does not load, said twice: in full for the log, and as one sentence (the
//! file, what is wrong, what to do) for the errors a client or a terminal gets, which must not
//! carry the file's bytes or pages of detail.

use std::path::Path;

use super::PluginError;

/// A file the host cannot use as a policy plugin, found before any of its code runs. The text
/// is the whole story, for the log and `plugin check`; [`sentence`] is the short one.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "not a loadable WebAssembly component: this file is not WebAssembly at all (it starts with {0}, not \"\\0asm\")"
    )]
    NotWasm(String),
    #[error(
        "not a loadable WebAssembly component: this is a core WebAssembly module, not a component (build for wasm32-wasip2)"
    )]
    CoreModule,
    #[error("not a loadable WebAssembly component: {0}")]
    Unparsable(String),
    #[error("it needs imports switchyard does not provide (wrong interface?): {0}")]
    Imports(String),
    #[error(
        "it implements neither the world switchyard:policy/policy@0.2.0 (expected exports init, decide, list-tool) \
         nor switchyard:policy/policy@0.1.0 (init, decide, annotate): wrong interface: {0}"
    )]
    WrongWorld(String),
}

/// The start of a file that is not WebAssembly, for the log: as text when it reads as text (an
/// HTML page or a Git LFS pointer saved as .wasm), else its first bytes in hex.
pub(super) fn first_bytes(bytes: &[u8]) -> String {
    let head = &bytes[..bytes.len().min(16)];
    let text = std::str::from_utf8(head).ok().filter(|t| t.chars().all(|c| !c.is_control() || c.is_whitespace()));
    match text {
        Some(t) => format!("\"{}\"", t.escape_debug()),
        None => {
            let hex: Vec<String> = head.iter().map(|b| format!("{b:02x}")).collect();
            format!("the bytes {}", hex.join(" "))
        }
    }
}

/// Longest quote of a plugin's own message in [`sentence`].
const QUOTED_CHARS: usize = 160;

/// One sentence for the plugin at `path` that did not load with `e`: the file, what is wrong,
/// and what to do. The log keeps `e` whole.
pub fn sentence(path: &Path, e: &anyhow::Error) -> String {
    const BUILD: &str = "put the .wasm that `switchyard plugin build` writes in its place";
    const CONTRACT: &str = "build it against the wit/policy.wit that `switchyard plugin new` writes";
    let (what, fix) = match (e.downcast_ref::<LoadError>(), e.downcast_ref::<PluginError>()) {
        (Some(LoadError::NotWasm(_)), _) => {
            ("is not WebAssembly (it does not begin with \\0asm, as every .wasm file does)".to_string(), BUILD)
        }
        (Some(LoadError::CoreModule), _) => (
            "is a core WebAssembly module, not a component".to_string(),
            "build it for the wasm32-wasip2 target (`switchyard plugin build` does)",
        ),
        (Some(LoadError::Unparsable(_)), _) => {
            ("is not a valid WebAssembly component (cut short or damaged?)".to_string(), BUILD)
        }
        (Some(LoadError::Imports(_)), _) => ("imports functions switchyard does not provide".to_string(), CONTRACT),
        (Some(LoadError::WrongWorld(_)), _) => {
            ("does not implement switchyard:policy 0.2.0 or 0.1.0".to_string(), CONTRACT)
        }
        (None, Some(PluginError::ConfigRefused(why))) => {
            (format!("refused its config ({})", quote(why)), "correct the `config` of its [[plugins]] entry")
        }
        (None, Some(e)) => (
            format!("failed as it started: it {}", quote(&e.to_string())),
            "the log shows what it printed; fix the plugin or remove it",
        ),
        (None, None) => (format!("cannot be loaded ({})", quote(&e.to_string())), "the log has the whole error"),
    };
    format!("plugin {} {what}: {fix}", path.display())
}

/// `text` on one line, without control characters, cut at [`QUOTED_CHARS`] with a mark.
fn quote(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let clean: String = flat.chars().filter(|c| !c.is_control()).collect();
    if clean.chars().count() <= QUOTED_CHARS {
        return clean;
    }
    let cut: String = clean.chars().take(QUOTED_CHARS).collect();
    format!("{}...", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_of_a_file_is_shown_as_text_or_as_bytes() {
        assert_eq!(first_bytes(b"<!DOCTYPE html>\n<html>"), "\"<!DOCTYPE html>\\n\"");
        assert_eq!(first_bytes(&[0x8f, 0x00, 0xff, b'a']), "the bytes 8f 00 ff 61");
    }

    #[test]
    fn a_sentence_names_the_file_what_is_wrong_and_the_fix() {
        let path = Path::new("/p/plugins/x.wasm");
        let e = anyhow::Error::new(LoadError::NotWasm(first_bytes(&[0x8f, 0x3a]))).context("loading x.wasm");
        let s = sentence(path, &e);
        assert!(s.starts_with("plugin /p/plugins/x.wasm is not WebAssembly"), "{s}");
        assert!(s.contains("`switchyard plugin build`") && !s.contains("8f"), "{s}");
        let long = "k".repeat(1000);
        let s = sentence(path, &anyhow::Error::new(PluginError::ConfigRefused(format!("unknown key `{long}`"))));
        assert!(s.contains("refused its config (unknown key `kkk") && s.contains("...)"), "{s}");
        assert!(s.len() < 300 && s.ends_with("correct the `config` of its [[plugins]] entry"), "{s}");
    }
}
