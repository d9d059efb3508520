//! `${VAR}` in values: header values and their variables, and a template's client values.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::spans::file_place;

/// A header value as written, `${VAR}` not yet expanded (it may still be a literal secret, so
/// Debug hides it), and where it was written, for errors.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "String")]
pub struct HeaderValue {
    pub raw: String,
    pub source: Source,
}

impl From<String> for HeaderValue {
    fn from(raw: String) -> Self {
        HeaderValue { raw, source: Source::Table }
    }
}

impl std::fmt::Debug for HeaderValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderValue").field("raw", &"<hidden>").field("source", &self.source).finish()
    }
}

/// Where a header was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A `[server] headers` table not read through [`Config::load`] (tests, built in code).
    ///
    /// [`Config::load`]: crate::Config::load
    Table,
    File {
        path: PathBuf,
        line: Option<usize>,
    },
    CommandLine,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Table => write!(f, "[server] headers"),
            Source::File { path, line } => write!(f, "{}", file_place(path, *line)),
            Source::CommandLine => write!(f, "--header"),
        }
    }
}

/// `header `Authorization` (config file x.toml, line 4)`: the start of every error about a header.
pub fn about_header(name: &str, source: &Source) -> String {
    format!("header `{name}` ({source})")
}

/// HTTP header names switchyard sets itself for the transport; with MCP's own
/// (`switchyard_mcp::header::PROTOCOL`), a configured one would clash.
const TRANSPORT_HEADERS: &[&str] = &["accept", "content-type", "content-length", "transfer-encoding", "connection"];

/// A header name must be an HTTP token (RFC 9110) and not one switchyard sets itself. The name
/// is not repeated in the error: a mistyped `--header` may have a secret where the name should be.
pub fn check_header_name(name: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() {
        return Err("has an empty name".into());
    }
    if let Some(c) = name.chars().find(|c| !token(*c)) {
        let what = match c {
            ' ' => "a space".to_string(),
            c if c.is_control() => "a control character".to_string(),
            c => format!("`{c}`"),
        };
        return Err(format!(
            "has a name with {what} in it; a header name has only letters, digits and !#$%&'*+-.^_`|~"
        ));
    }
    let lower = name.to_ascii_lowercase();
    if TRANSPORT_HEADERS.iter().chain(switchyard_mcp::header::PROTOCOL).any(|h| *h == lower) {
        return Err("is set by switchyard itself, as the protocol needs it; remove it".into());
    }
    Ok(())
}

/// One part of a header value as written: text, or a `${VAR}` reference.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Text(String),
    Var(&'a str),
}

/// Splits a header value into text and `${VAR}` references; `$${` stands for a literal `${`,
/// and any other `$` is itself.
pub(crate) fn pieces(raw: &str) -> Result<Vec<Piece<'_>>, String> {
    let is_name = is_var_name;
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = raw;
    while let Some(i) = rest.find('$') {
        text.push_str(&rest[..i]);
        let at = &rest[i..];
        if let Some(r) = at.strip_prefix("$${") {
            text.push_str("${");
            rest = r;
        } else if let Some(r) = at.strip_prefix("${") {
            let Some(end) = r.find('}') else {
                return Err("has `${` without a closing `}` (write `$${` for a literal `${`)".into());
            };
            let name = &r[..end];
            if !is_name(name) {
                // The text after `${` is not named: it may be part of a secret.
                return Err("has `${` followed by something that is not a variable name (letters, digits and `_`, not starting with a digit); write `$${` for a literal `${`".into());
            }
            if !text.is_empty() {
                out.push(Piece::Text(std::mem::take(&mut text)));
            }
            out.push(Piece::Var(name));
            rest = &r[end + 1..];
        } else {
            text.push('$');
            rest = &at[1..];
        }
    }
    text.push_str(rest);
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// A variable name: ASCII letters, digits and `_`, not starting with a digit.
pub fn is_var_name(n: &str) -> bool {
    n.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `text` refers to one of `names` as `${NAME}`.
pub(crate) fn uses_client_env(text: &str, names: &[String]) -> bool {
    names.iter().any(|n| text.contains(&format!("${{{n}}}")))
}

/// `text` with every `${NAME}` of a name in `values` replaced by its value, in one pass, so a
/// value is never read again (a value holding `${OTHER}` stays as it is). `$${NAME}` of such a
/// name is a literal `${NAME}`; every other text, other `${X}` included, is left as written.
pub(crate) fn substitute(text: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let named = after.find('}').map(|end| (&after[..end], &after[end + 1..]));
        match named.and_then(|(name, tail)| Some((name, values.get(name)?, tail))) {
            Some((name, value, tail)) => {
                if rest[..i].ends_with('$') {
                    out.push_str(&rest[..i - 1]);
                    out.push_str(&format!("${{{name}}}"));
                } else {
                    out.push_str(&rest[..i]);
                    out.push_str(value);
                }
                rest = tail;
            }
            None => {
                out.push_str(&rest[..i + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Whether a header value refers to a variable (`${VAR}`, not the escaped `$${`).
pub fn uses_vars(raw: &str) -> bool {
    pieces(raw).map_or(true, |p| p.iter().any(|p| matches!(p, Piece::Var(_))))
}

/// What in `s` a header value cannot carry, if anything: RFC 9110 allows visible ASCII, space,
/// tab, and bytes from 0x80 (obs-text).
pub(crate) fn forbidden(s: &str) -> Option<&'static str> {
    s.chars().find_map(|c| match c {
        '\r' => Some("a carriage return (CR)"),
        '\n' => Some("a line feed (LF)"),
        '\t' => None,
        c if c.is_ascii_control() => Some("a control character"),
        _ => None,
    })
}

/// Checks a header as written, before any variable is read: its name, its `${VAR}` syntax and
/// its literal text. The error completes "header `X` (where) ...", and never holds the value.
pub fn check_header(name: &str, raw: &str) -> Result<(), String> {
    check_header_name(name)?;
    for piece in pieces(raw)? {
        if let Piece::Text(t) = piece
            && let Some(what) = forbidden(&t)
        {
            return Err(format!("has {what} in its value, which a header cannot carry"));
        }
    }
    Ok(())
}

/// A header value with its variables read.
#[derive(PartialEq, Eq)]
pub struct Expanded {
    pub value: String,
    /// The variables used, in order of first use.
    pub vars: Vec<String>,
    /// The variables that were set but empty.
    pub empty: Vec<String>,
}

impl std::fmt::Debug for Expanded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Expanded")
            .field("value", &"<hidden>")
            .field("vars", &self.vars)
            .field("empty", &self.empty)
            .finish()
    }
}

/// Reads every `${VAR}` of a header value through `env` (`std::env::var` outside tests). The
/// error completes "header `X` (where) ...", names the variable and never holds a value.
pub fn expand(raw: &str, env: &dyn Fn(&str) -> Result<String, std::env::VarError>) -> Result<Expanded, String> {
    let mut out = Expanded { value: String::new(), vars: Vec::new(), empty: Vec::new() };
    for piece in pieces(raw)? {
        match piece {
            Piece::Text(t) => {
                if let Some(what) = forbidden(&t) {
                    return Err(format!("has {what} in its value, which a header cannot carry"));
                }
                out.value.push_str(&t);
            }
            Piece::Var(name) => {
                let v = match env(name) {
                    Ok(v) => v,
                    Err(std::env::VarError::NotPresent) => {
                        return Err(format!(
                            "uses ${{{name}}}, which is not set: set {name} in switchyard's environment (write `$${{` for a literal `${{`)"
                        ));
                    }
                    Err(std::env::VarError::NotUnicode(_)) => {
                        return Err(format!("uses ${{{name}}}, whose value is not valid UTF-8"));
                    }
                };
                if let Some(what) = forbidden(&v) {
                    return Err(format!(
                        "uses ${{{name}}}, whose value has {what}, which a header cannot carry (a value read from a file often ends with a line feed)"
                    ));
                }
                if v.is_empty() && !out.empty.iter().any(|e| e == name) {
                    out.empty.push(name.to_string());
                }
                if !out.vars.iter().any(|e| e == name) {
                    out.vars.push(name.to_string());
                }
                out.value.push_str(&v);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use crate::test_support::load_text;

    #[test]
    fn header_names_must_be_tokens_and_not_the_protocol_s_own() {
        assert!(check_header_name("Authorization").is_ok() && check_header_name("X-Api_Key.v2~").is_ok());
        for (name, says) in [
            ("", "empty name"),
            ("X Api", "a space"),
            ("X:Api", "`:`"),
            ("X\u{1}", "a control character"),
            ("Mcp-Session-Id", "set by switchyard itself"),
            ("content-type", "set by switchyard itself"),
        ] {
            let e = check_header_name(name).unwrap_err();
            assert!(e.contains(says), "{name:?}: {e}");
        }
        let (_d, c) = load_text(
            "[server]\nurl = \"https://h/\"\n[server.headers]\nAuthorization = \"a\"\nauthorization = \"b\"\n",
        );
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("given twice") && e.contains("line 5"), "{e}");
    }

    #[test]
    fn header_values_refuse_line_breaks_and_controls_but_not_obs_text() {
        assert!(check_header("X", "a b\tc ~ é").is_ok());
        for (raw, says) in [("a\r\nInjected: 1", "carriage return"), ("a\nb", "line feed"), ("a\u{7f}", "control")] {
            let e = check_header("X", raw).unwrap_err();
            assert!(e.contains(says) && !e.contains("Injected"), "{raw:?}: {e}");
        }
        for raw in ["Bearer ${TOKEN", "${1X}", "${}", "${A-B}"] {
            let e = check_header("X", raw).unwrap_err();
            assert!(e.contains("`${`") && e.contains("$${"), "{raw:?}: {e}");
        }
        let (_d, c) = load_text("[server]\nurl = \"https://h/\"\nheaders = { X = \"a\\nb\" }\n");
        let e = format!("{:#}", c.unwrap_err());
        assert!(e.contains("header `X` (config file") && e.contains("line 3)") && e.contains("line feed"), "{e}");
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Result<String, std::env::VarError> {
        move |name| pairs.iter().find(|p| p.0 == name).map(|p| p.1.to_string()).ok_or(std::env::VarError::NotPresent)
    }

    #[test]
    fn variables_are_expanded_recorded_and_escaped() {
        let env = env_of(&[("MCP_TOKEN", "s3cr3t"), ("TEAM", "core"), ("EMPTY", "")]);
        let e = expand("Bearer ${MCP_TOKEN}", &env).unwrap();
        assert_eq!((e.value.as_str(), e.vars.as_slice()), ("Bearer s3cr3t", &["MCP_TOKEN".to_string()][..]));
        let e = expand("${TEAM}/${MCP_TOKEN}/${TEAM}", &env).unwrap();
        assert_eq!(e.value, "core/s3cr3t/core");
        assert_eq!(e.vars, ["TEAM", "MCP_TOKEN"]);
        // `$${` is a literal `${`; any other `$` is itself.
        let e = expand("$${MCP_TOKEN} costs $5 $$ ${TEAM}", &env).unwrap();
        assert_eq!(e.value, "${MCP_TOKEN} costs $5 $$ core");
        assert_eq!(e.vars, ["TEAM"]);
        assert!(!uses_vars("$${MCP_TOKEN}") && uses_vars("x ${A}") && !uses_vars("plain"));
        let e = expand("a${EMPTY}b${EMPTY}", &env).unwrap();
        assert_eq!((e.value.as_str(), e.empty.as_slice()), ("ab", &["EMPTY".to_string()][..]));
    }

    #[test]
    fn a_missing_or_unusable_variable_is_named_and_its_value_is_not() {
        let e = expand("Bearer ${MCP_TOKEN}", &env_of(&[])).unwrap_err();
        assert!(e.contains("${MCP_TOKEN}") && e.contains("not set"), "{e}");
        let e = expand("Bearer ${MCP_TOKEN}", &env_of(&[("MCP_TOKEN", "s3cr3t\n")])).unwrap_err();
        assert!(e.contains("${MCP_TOKEN}") && e.contains("line feed") && !e.contains("s3cr3t"), "{e}");
        let e = expand("${T}", &|_| Err(std::env::VarError::NotUnicode("x".into()))).unwrap_err();
        assert!(e.contains("${T}") && e.contains("UTF-8"), "{e}");
    }

    #[test]
    fn debug_output_hides_header_values() {
        let c: Config =
            toml::from_str("[server]\nurl = \"https://h/\"\nheaders = { Authorization = \"Bearer lit3ral\" }\n")
                .unwrap();
        let shown = format!("{c:?}");
        assert!(shown.contains("Authorization") && !shown.contains("lit3ral"), "{shown}");
    }
}
