//! `[telemetry]`: where switchyard sends its traces (OTLP over HTTP), read once at start.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::vars::{HeaderValue, check_header_name, expand};

/// `[telemetry]`. Traces go out only when an endpoint is given, here or in
/// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// `false` keeps traces off even when the environment names an endpoint.
    pub enabled: bool,
    /// The OTLP/HTTP collector's base URL (`/v1/traces` is added), e.g. `http://127.0.0.1:4318`.
    pub endpoint: Option<String>,
    /// The full URL traces are posted to, as given (over `endpoint`).
    pub traces_endpoint: Option<String>,
    /// The full URL metrics are posted to, as given (over `endpoint`). Metrics go out when this
    /// or a base endpoint is named (not for a `traces_endpoint` alone).
    pub metrics_endpoint: Option<String>,
    /// Headers sent with every export (an API key, say); `${VAR}` in a value is read from the
    /// environment. Never logged.
    pub headers: BTreeMap<String, HeaderValue>,
    /// `service.name` of the traces (default: `OTEL_SERVICE_NAME`, else `switchyard`).
    pub service_name: Option<String>,
    /// The file the table was read from and the line of each of its keys, for the warnings
    /// about them (set by [`TelemetryConfig::from_file`] only).
    #[serde(skip)]
    pub(crate) file: Option<KeyLines>,
}

/// Where a `[telemetry]` table's keys are: its file, and the line of each key (`headers.NAME`
/// for a header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyLines {
    path: std::path::PathBuf,
    lines: BTreeMap<String, usize>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            enabled: true,
            endpoint: None,
            traces_endpoint: None,
            metrics_endpoint: None,
            headers: BTreeMap::new(),
            service_name: None,
            file: None,
        }
    }
}

/// Where traces and metrics go and how, as `[telemetry]` and the `OTEL_*` variables give it
/// together.
#[derive(Clone, PartialEq, Eq)]
pub struct TelemetryTarget {
    /// The URL spans are posted to (None: traces are not exported, `OTEL_TRACES_EXPORTER=none`).
    pub traces_url: Option<String>,
    /// The URL the MCP durations are posted to (None: metrics are not exported).
    pub metrics_url: Option<String>,
    /// Headers of each export of spans, `${VAR}` expanded (secrets: never logged, see the
    /// Debug impl): the table's, `OTEL_EXPORTER_OTLP_HEADERS`' and
    /// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`', each over the one before for a header named twice.
    pub traces_headers: Vec<(String, String)>,
    /// The same for metrics, with `OTEL_EXPORTER_OTLP_METRICS_HEADERS` last: a signal's own
    /// variable never goes to the other signal's endpoint.
    pub metrics_headers: Vec<(String, String)>,
    pub service_name: Option<String>,
    /// What was left out of the headers, or is not as asked (a protocol), for warnings at
    /// start: a header's entry is named by its place and key, never its value.
    pub warnings: Vec<String>,
}

impl TelemetryTarget {
    /// `url` for logs: without credentials, query or fragment.
    pub fn shown(url: &str) -> String {
        url::Url::parse(url).map_or_else(|_| "the collector".to_string(), |u| crate::display_url(&u))
    }
}

impl std::fmt::Debug for TelemetryTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |h: &[(String, String)]| h.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        f.debug_struct("TelemetryTarget")
            .field("traces_url", &self.traces_url)
            .field("metrics_url", &self.metrics_url)
            .field("traces_headers", &names(&self.traces_headers))
            .field("metrics_headers", &names(&self.metrics_headers))
            .field("service_name", &self.service_name)
            .field("warnings", &self.warnings)
            .finish()
    }
}

impl TelemetryConfig {
    /// The `[telemetry]` table of the config file at `path` alone, read before logging starts
    /// (the rest of the file is read, and its errors told, after), with the line of each key
    /// for the warnings about them: the defaults when the file is missing or does not parse.
    pub fn from_file(path: &std::path::Path) -> TelemetryConfig {
        Self::loaded_from_file(path).unwrap_or_default()
    }

    /// [`TelemetryConfig::from_file`], None when the file is there but its `[telemetry]` does
    /// not load (the file is no TOML, or the table has a key it does not know or a wrong type).
    pub fn loaded_from_file(path: &std::path::Path) -> Option<TelemetryConfig> {
        #[derive(Deserialize)]
        struct Only {
            #[serde(default)]
            telemetry: TelemetryConfig,
        }
        #[derive(Default, Deserialize)]
        struct Spans {
            #[serde(default)]
            telemetry: BTreeMap<String, toml::Spanned<toml::Value>>,
        }
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let Ok(mut table) = toml::from_str::<Only>(&text).map(|o| o.telemetry) else {
            return None;
        };
        let spans: Spans = toml::from_str(&text).unwrap_or_default();
        let line = |s: &toml::Spanned<toml::Value>| crate::spans::line_of(&text, s.span().start);
        let mut lines = BTreeMap::new();
        for (key, at) in &spans.telemetry {
            lines.insert(key.clone(), line(at));
        }
        // A header's line is its key's; an inline table's keys have no spans of their own here,
        // so they take the line of `headers`.
        if let Some(at) = spans.telemetry.get("headers") {
            for name in table.headers.keys() {
                lines.insert(format!("headers.{name}"), line(at));
            }
        }
        table.file = Some(KeyLines { path: path.to_path_buf(), lines });
        Some(table)
    }

    /// `[telemetry] KEY`, after the file and line it is at when the table was read from a file.
    fn at(&self, key: &str) -> String {
        let line = |k: &str| self.file.as_ref().and_then(|f| f.lines.get(k).copied());
        match &self.file {
            Some(f) => format!(
                "{}: [telemetry] {key}",
                crate::spans::file_place(&f.path, line(key).or_else(|| line(key.split('.').next()?)))
            ),
            None => format!("[telemetry] {key}"),
        }
    }

    /// Where traces and metrics go: the table's endpoint over the environment's (the
    /// per-signal URL over the base one in each), each signal off with its
    /// `OTEL_{SIGNAL}_EXPORTER=none`; None when neither goes anywhere, or `enabled = false` or
    /// `OTEL_SDK_DISABLED=true`. When neither goes anywhere though an `OTEL_{SIGNAL}_EXPORTER`
    /// asks for one (`console`, say, with no endpoint), a target with no URL carries the
    /// warning that says so, for the log at start. The error names the key (with its file and line) or the
    /// variable at fault, never a header's value.
    pub fn target(
        &self,
        env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
    ) -> Result<Option<TelemetryTarget>, String> {
        let var = |name: &str| env(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        if !self.enabled || var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let off =
            |signal: &str| var(&format!("OTEL_{signal}_EXPORTER")).is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let mut urls = Vec::new();
        for (signal, own) in [("traces", &self.traces_endpoint), ("metrics", &self.metrics_endpoint)] {
            let url = match self.signal_url(signal, own, &var) {
                _ if off(&signal.to_ascii_uppercase()) => None,
                // A metrics URL is taken only with a base endpoint or its own: not from where
                // traces go alone.
                Some(given) => Some(checked_url(given)?),
                None => None,
            };
            urls.push(url);
        }
        let [traces_url, metrics_url]: [Option<String>; 2] = urls.try_into().expect("two signals");
        let nowhere: Vec<String> = [("traces", &traces_url), ("metrics", &metrics_url)]
            .into_iter()
            .filter(|(_, url)| url.is_none())
            .filter_map(|(signal, _)| nowhere_warning(&var, signal, self.table_decides()))
            .collect();
        if traces_url.is_none() && metrics_url.is_none() {
            // Nothing is sent; a target with no URL only carries what the user must be told.
            return Ok((!nowhere.is_empty()).then(|| TelemetryTarget {
                traces_url: None,
                metrics_url: None,
                traces_headers: Vec::new(),
                metrics_headers: Vec::new(),
                service_name: None,
                warnings: nowhere,
            }));
        }
        let mut table = Vec::new();
        for (name, value) in &self.headers {
            let at = || self.at(&format!("headers.{name}"));
            check_header_name(name).map_err(|e| format!("{}: `{name}` {e}", at()))?;
            let v = expand(&value.raw, env).map_err(|e| format!("{}: `{name}` {e}", at()))?;
            table.push((name.clone(), v.value));
        }
        // Each variable's headers over those before them: the table's, the general variable's,
        // then the signal's own, which is sent to that signal's endpoint alone.
        let mut warnings = Vec::new();
        let mut read = |name: &str| match env(name) {
            Ok(text) => {
                let (parsed, mut left_out) = env_headers(name, &text);
                warnings.append(&mut left_out);
                parsed
            }
            Err(_) => Vec::new(),
        };
        let general = read("OTEL_EXPORTER_OTLP_HEADERS");
        let traces_headers = layered(&[&table, &general, &read("OTEL_EXPORTER_OTLP_TRACES_HEADERS")]);
        let metrics_headers = layered(&[&table, &general, &read("OTEL_EXPORTER_OTLP_METRICS_HEADERS")]);
        warnings.extend(protocol_warning(&var, traces_url.as_deref().or(metrics_url.as_deref())));
        for (signal, url) in [("traces", &traces_url), ("metrics", &metrics_url)] {
            warnings.extend(url.as_deref().and_then(|url| exporter_warning(&var, signal, url)));
        }
        warnings.extend(nowhere);
        let service_name = self.service_name.clone().or_else(|| var("OTEL_SERVICE_NAME"));
        Ok(Some(TelemetryTarget { traces_url, metrics_url, traces_headers, metrics_headers, service_name, warnings }))
    }

    /// Whether the table names any endpoint: then it decides for every signal, and none is
    /// taken from the environment.
    fn table_decides(&self) -> bool {
        self.endpoint.is_some() || self.traces_endpoint.is_some() || self.metrics_endpoint.is_some()
    }

    /// The URL of one `signal` (`traces`, `metrics`) and where it was given: the table's own
    /// URL for it, else the table's base endpoint with `/v1/SIGNAL`, else the same two from the
    /// environment. None when none of them is set.
    fn signal_url(&self, signal: &str, own: &Option<String>, var: &dyn Fn(&str) -> Option<String>) -> Option<Given> {
        let own_var = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.to_ascii_uppercase());
        let base = |written: String, from: String| Given { url: with_path(&written, signal), written, from };
        let whole = |written: String, from: String| Given { url: written.clone(), written, from };
        match (own, &self.endpoint) {
            (Some(u), _) => Some(whole(u.clone(), self.at(&format!("{signal}_endpoint")))),
            (None, Some(u)) => Some(base(u.clone(), self.at("endpoint"))),
            (None, None) if self.table_decides() => None,
            (None, None) => match (var(&own_var), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
                (Some(u), _) => Some(whole(u, own_var)),
                (None, Some(u)) => Some(base(u, "OTEL_EXPORTER_OTLP_ENDPOINT".to_string())),
                (None, None) => None,
            },
        }
    }
}

/// A signal's URL, what the user wrote for it (a base endpoint without the signal's path) and
/// where (`config file X, line N: [telemetry] endpoint`, or the variable).
struct Given {
    url: String,
    written: String,
    from: String,
}

/// The base URL `url` with the signal's path after its own (its query, if any, stays last).
fn with_path(url: &str, signal: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) => {
            let path = format!("{}/v1/{signal}", u.path().trim_end_matches('/'));
            u.set_path(&path);
            u.to_string()
        }
        Err(_) => url.to_string(),
    }
}

/// The URL of `given` if what was written is an HTTP(S) URL, else the error that says so, with
/// the URL as written.
fn checked_url(given: Given) -> Result<String, String> {
    let w = &given.written;
    if !(w.starts_with("http://") || w.starts_with("https://")) || url::Url::parse(w).is_err() {
        return Err(format!(
            "{} is `{w}`: give the OTLP/HTTP collector's URL, e.g. http://127.0.0.1:4318 (traces and metrics are sent as HTTP/protobuf)",
            given.from
        ));
    }
    Ok(given.url)
}

/// `lists` in order, a header named again (in any case) taking the later list's value.
fn layered(lists: &[&Vec<(String, String)>]) -> Vec<(String, String)> {
    let mut headers: Vec<(String, String)> = Vec::new();
    for (k, v) in lists.iter().flat_map(|l| l.iter()) {
        headers.retain(|(h, _)| !h.eq_ignore_ascii_case(k));
        headers.push((k.clone(), v.clone()));
    }
    headers
}

/// The warning for an `OTEL_EXPORTER_OTLP_*PROTOCOL` other than `http/protobuf` (gRPC, JSON),
/// one for all of them: switchyard sends HTTP/protobuf whatever they say, to `url`.
fn protocol_warning(var: &dyn Fn(&str) -> Option<String>, url: Option<&str>) -> Option<String> {
    let names =
        ["OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"];
    let asked: Vec<String> = names
        .iter()
        .filter_map(|n| var(n).filter(|v| !v.eq_ignore_ascii_case("http/protobuf")).map(|v| format!("{n}={v}")))
        .collect();
    if asked.is_empty() {
        return None;
    }
    Some(format!(
        "{}: switchyard supports only http/protobuf, and sends http/protobuf to {} (a collector's OTLP/HTTP port is 4318 by default; its gRPC port 4317 does not take it)",
        asked.join(", "),
        url.map_or_else(|| "the collector".to_string(), TelemetryTarget::shown)
    ))
}

/// The warning for `OTEL_{SIGNAL}_EXPORTER` naming an exporter switchyard does not have (`zipkin`,
/// `console`, ...) while `signal` goes to `url`: it is sent over OTLP all the same. The value is
/// shown as given (escaped, and cut when long): it names an exporter, not a secret.
fn exporter_warning(var: &dyn Fn(&str) -> Option<String>, signal: &str, url: &str) -> Option<String> {
    let name = format!("OTEL_{}_EXPORTER", signal.to_ascii_uppercase());
    let value = var(&name)?;
    let known = |e: &str| e.eq_ignore_ascii_case("otlp") || e.eq_ignore_ascii_case("none");
    if exporters(&value).all(known) {
        return None;
    }
    Some(format!(
        "{name} is `{}`: switchyard exports {signal} over OTLP only (`otlp`, or `none` for no {signal}), and sends them as OTLP/HTTP to {} all the same",
        shown_value(&value),
        TelemetryTarget::shown(url)
    ))
}

/// The warning for `OTEL_{SIGNAL}_EXPORTER` asking for `signal` (`otlp`, `console`, ...) while
/// no endpoint is set for it: nothing is sent, and that must not go unsaid. A console exporter
/// is never made: switchyard's stdout carries the MCP protocol alone. `table_decides`: the fix
/// is in `[telemetry]`, whose endpoints are taken over the environment's.
fn nowhere_warning(var: &dyn Fn(&str) -> Option<String>, signal: &str, table_decides: bool) -> Option<String> {
    let name = format!("OTEL_{}_EXPORTER", signal.to_ascii_uppercase());
    let value = var(&name)?;
    let named = |what: &str| exporters(&value).any(|e| e.eq_ignore_ascii_case(what));
    if exporters(&value).all(|e| e.eq_ignore_ascii_case("none")) {
        return None;
    }
    // Short enough that `status` (which keeps 300 characters of a warning) shows the fix.
    let fix = if table_decides {
        format!("add endpoint or {signal}_endpoint to [telemetry]")
    } else {
        "set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318) or [telemetry] endpoint".to_string()
    };
    let head = format!("{name} is `{}`", shown_value(&value));
    let nothing = format!("no endpoint is set: {signal} go nowhere; {fix}");
    Some(if named("console") {
        format!(
            "{head}: switchyard prints no {signal} (its stdout carries the MCP protocol alone), it sends them over OTLP only, and {nothing}"
        )
    } else if exporters(&value).all(|e| e.eq_ignore_ascii_case("otlp") || e.eq_ignore_ascii_case("none")) {
        format!("{head}, but {nothing}")
    } else {
        format!("{head}: switchyard sends {signal} over OTLP only, and {nothing}")
    })
}

/// The exporters an `OTEL_{SIGNAL}_EXPORTER` value names (a comma-separated list).
fn exporters(value: &str) -> impl Iterator<Item = &str> + Clone {
    value.split(',').map(|e| e.trim_matches([' ', '\t']))
}

/// An exporter variable's value for a warning: as given, escaped, and cut when long (it names
/// an exporter, not a secret).
fn shown_value(value: &str) -> String {
    let shown: String = value.chars().take(64).collect::<String>().escape_debug().collect();
    if value.chars().count() > 64 { format!("{shown}...") } else { shown }
}

/// The headers of `OTEL_EXPORTER_OTLP_HEADERS` (or a signal's own variant, `var`): `key=value`
/// pairs split by commas, each value percent-decoded. An entry that is no such pair, or whose
/// key or decoded value no header may have, is left out, and the second list says so by its
/// place (and its key, when it has one), never by its value: values are secrets.
pub fn env_headers(var: &str, text: &str) -> (Vec<(String, String)>, Vec<String>) {
    let (mut headers, mut left_out) = (Vec::new(), Vec::new());
    for (i, entry) in text.split(',').enumerate() {
        let entry = entry.trim_matches([' ', '\t']);
        if entry.is_empty() {
            continue;
        }
        let at = format!("{var}: entry {}", i + 1);
        let Some((key, value)) = entry.split_once('=') else {
            left_out.push(format!("{at} has no `=`; write it as key=value (it is left out)"));
            continue;
        };
        let key = key.trim_matches([' ', '\t']);
        let why = if key.is_empty() {
            Some("has no key before its `=`".to_string())
        } else if let Err(e) = check_header_name(key) {
            Some(e)
        } else {
            match percent_decoded(value.trim_matches([' ', '\t'])) {
                Err(e) => Some(format!("`{key}` {e}")),
                Ok(v) => match bad_value(&v) {
                    Some(e) => Some(format!("`{key}`: its value {e}")),
                    None => {
                        headers.push((key.to_string(), v));
                        None
                    }
                },
            }
        };
        if let Some(why) = why {
            // A key that is no header name is not shown either: it may be a value typed in its place.
            left_out.push(format!("{at} {why} (it is left out)"));
        }
    }
    (headers, left_out)
}

/// `value` with its `%XX` escapes decoded (the OTel spec's form of header values in variables).
fn percent_decoded(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                Some(b) => out.push(b),
                None => return Err("has a `%` not followed by two hex digits in its value; write a `%` as %25".into()),
            }
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "has %-escapes in its value that decode to no UTF-8 text".to_string())
}

/// Why `value` cannot be sent as a header value (a control character: a newline, say), if so.
fn bad_value(value: &str) -> Option<&'static str> {
    value
        .chars()
        .any(|c| c.is_control() && c != '\t')
        .then_some("has a control character (a newline, say) in it, which no header value may have")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<String, std::env::VarError> + use<> {
        let map: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned().ok_or(std::env::VarError::NotPresent)
    }

    fn table(text: &str) -> TelemetryConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn the_table_is_read_from_a_file_whatever_else_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("switchyard.toml");
        std::fs::write(&file, "[servers.a]\ncommand = 7\n[telemetry]\nendpoint = \"http://h:1\"\n").unwrap();
        assert_eq!(TelemetryConfig::from_file(&file).endpoint.as_deref(), Some("http://h:1"));
        assert_eq!(TelemetryConfig::from_file(&dir.path().join("none")).endpoint, None);
    }

    #[test]
    fn off_unless_an_endpoint_is_named() {
        assert_eq!(TelemetryConfig::default().target(&env_of(&[])).unwrap(), None);
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]);
        let t = TelemetryConfig::default().target(&env).unwrap().unwrap();
        assert_eq!(t.traces_url.as_deref(), Some("http://127.0.0.1:4318/v1/traces"));
        assert_eq!(table("enabled = false").target(&env).unwrap(), None);
        let disabled = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:1"), ("OTEL_SDK_DISABLED", "TRUE")]);
        assert_eq!(TelemetryConfig::default().target(&disabled).unwrap(), None);
    }

    #[test]
    fn the_table_comes_before_the_environment_and_the_signal_url_before_the_base() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:1"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://env:2/traces"),
            ("OTEL_SERVICE_NAME", "from-env"),
        ]);
        let t = TelemetryConfig::default().target(&env).unwrap().unwrap();
        assert_eq!(
            (t.traces_url.as_deref(), t.service_name.as_deref()),
            (Some("http://env:2/traces"), Some("from-env"))
        );
        let t = table("endpoint = \"http://file:3\"\nservice_name = \"mine\"").target(&env).unwrap().unwrap();
        assert_eq!(
            (t.traces_url.as_deref(), t.service_name.as_deref()),
            (Some("http://file:3/v1/traces"), Some("mine"))
        );
        let t = table("endpoint = \"http://file:3\"\ntraces_endpoint = \"http://file:4/x\"").target(&env).unwrap();
        assert_eq!(t.unwrap().traces_url.as_deref(), Some("http://file:4/x"));
    }

    #[test]
    fn metrics_go_where_a_base_endpoint_or_their_own_url_says_and_not_with_traces_alone() {
        let t = table("endpoint = \"http://file:3/otlp\"").target(&env_of(&[])).unwrap().unwrap();
        assert_eq!(t.metrics_url.as_deref(), Some("http://file:3/otlp/v1/metrics"));
        let own = table("endpoint = \"http://file:3\"\nmetrics_endpoint = \"http://file:5/m\"");
        assert_eq!(own.target(&env_of(&[])).unwrap().unwrap().metrics_url.as_deref(), Some("http://file:5/m"));
        // A table that names only where traces go decides for metrics too: none, whatever the
        // environment says.
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:1")]);
        let t = table("traces_endpoint = \"http://file:4/x\"").target(&env).unwrap().unwrap();
        assert_eq!((t.traces_url.as_deref(), t.metrics_url), (Some("http://file:4/x"), None));
        let t = TelemetryConfig::default().target(&env).unwrap().unwrap();
        assert_eq!(t.metrics_url.as_deref(), Some("http://env:1/v1/metrics"));
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:1"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://env:2/m"),
        ]);
        assert_eq!(
            TelemetryConfig::default().target(&env).unwrap().unwrap().metrics_url.as_deref(),
            Some("http://env:2/m")
        );
        let off = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:1"), ("OTEL_METRICS_EXPORTER", "none")]);
        let t = TelemetryConfig::default().target(&off).unwrap().unwrap();
        assert_eq!((t.traces_url.as_deref(), t.metrics_url), (Some("http://env:1/v1/traces"), None));
        let e = table("endpoint = \"http://h:1\"\nmetrics_endpoint = \"h:2\"").target(&env_of(&[])).unwrap_err();
        assert!(e.starts_with("[telemetry] metrics_endpoint is `h:2`"), "{e}");
    }

    #[test]
    fn headers_read_variables_and_hide_their_values() {
        let env = env_of(&[("OTEL_TOKEN", "s3cret")]);
        let t = table("endpoint = \"http://h:1\"\nheaders = { x-api-key = \"k ${OTEL_TOKEN}\" }")
            .target(&env)
            .unwrap()
            .unwrap();
        assert_eq!(t.traces_headers, vec![("x-api-key".to_string(), "k s3cret".to_string())]);
        assert_eq!(t.metrics_headers, t.traces_headers, "the table's headers go with both");
        let t = table("endpoint = \"https://u:pw@h:1/?key=k\"").target(&env).unwrap().unwrap();
        assert_eq!(TelemetryTarget::shown(t.traces_url.as_deref().unwrap()), "https://h:1/v1/traces");
        assert_eq!(t.traces_url.as_deref(), Some("https://u:pw@h:1/v1/traces?key=k"));
        assert!(!format!("{t:?}").contains("s3cret"));
        let e = table("endpoint = \"http://h:1\"\nheaders = { x-api-key = \"${NOPE}\" }").target(&env).unwrap_err();
        assert!(e.contains("x-api-key") && e.contains("NOPE"), "{e}");
    }

    #[test]
    fn the_variables_headers_are_percent_decoded_and_a_bad_entry_is_said_by_place_not_value() {
        let text = "a=x%20y%2C, novalue-s1 ,=s2,x k=s3,nl=s4\nz,pct=s5%ZZ,utf=%C3%A9,bad=%FF,,";
        let (headers, said) = env_headers("OTEL_EXPORTER_OTLP_HEADERS", text);
        let want = [("a", "x y,"), ("utf", "\u{e9}")].map(|(k, v)| (k.to_string(), v.to_string()));
        assert_eq!(headers, want);
        assert_eq!(said.len(), 6, "{said:#?}");
        let expect = [(2, ""), (3, ""), (4, ""), (5, "`nl`"), (6, "`pct`"), (8, "`bad`")];
        for (line, (entry, key)) in said.iter().zip(expect) {
            assert!(line.starts_with(&format!("OTEL_EXPORTER_OTLP_HEADERS: entry {entry} ")), "{line}");
            assert!(line.contains(key) && line.ends_with("(it is left out)"), "{line}");
            assert!(!(1..=5).any(|i| line.contains(&format!("s{i}"))), "a value: {line}");
        }
    }

    #[test]
    fn each_signal_gets_the_general_headers_and_its_own_and_never_the_other_signal_s() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_HEADERS", "k=general,g=all"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "K=traces,x-traces-key=tk,oops"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-metrics-key=mk"),
        ]);
        let t =
            table("endpoint = \"http://h:1\"\nheaders = { k = \"table\", j = \"t\" }").target(&env).unwrap().unwrap();
        let pairs = |l: &[(&str, &str)]| l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        assert_eq!(t.traces_headers, pairs(&[("j", "t"), ("g", "all"), ("K", "traces"), ("x-traces-key", "tk")]));
        assert_eq!(t.metrics_headers, pairs(&[("j", "t"), ("k", "general"), ("g", "all"), ("x-metrics-key", "mk")]));
        assert_eq!(t.warnings.len(), 1, "{:?}", t.warnings);
        assert!(t.warnings[0].starts_with("OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 3 "), "{:?}", t.warnings);
        let e = table("endpoint = \"http://h:1\"\nheaders = { k = \"a\\nb\" }").target(&env).unwrap_err();
        assert!(e.contains("`k`") && !e.contains("a\nb"), "{e}");
    }

    #[test]
    fn traces_exporter_none_turns_traces_off_and_leaves_metrics_to_their_own() {
        let env = |pairs: &[(&'static str, &'static str)]| {
            let mut all = vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:1")];
            all.extend_from_slice(pairs);
            env_of(&all)
        };
        let t = TelemetryConfig::default().target(&env(&[("OTEL_TRACES_EXPORTER", "none")])).unwrap().unwrap();
        assert_eq!((t.traces_url, t.metrics_url.as_deref()), (None, Some("http://env:1/v1/metrics")));
        let t = table("endpoint = \"http://file:3\"").target(&env(&[("OTEL_TRACES_EXPORTER", "NONE")])).unwrap();
        assert_eq!(t.unwrap().traces_url, None, "over the table's endpoint too, as OTEL_METRICS_EXPORTER is");
        let both = env(&[("OTEL_TRACES_EXPORTER", "none"), ("OTEL_METRICS_EXPORTER", "none")]);
        assert_eq!(TelemetryConfig::default().target(&both).unwrap(), None, "nothing to send");
        let t = TelemetryConfig::default().target(&env(&[("OTEL_TRACES_EXPORTER", "otlp")])).unwrap().unwrap();
        assert_eq!(t.traces_url.as_deref(), Some("http://env:1/v1/traces"));
    }

    #[test]
    fn a_protocol_other_than_http_protobuf_is_warned_once_with_where_it_goes() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://u:pw@env:4317?k=1"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ]);
        let t = TelemetryConfig::default().target(&env).unwrap().unwrap();
        assert_eq!(t.warnings.len(), 1, "{:?}", t.warnings);
        let w = &t.warnings[0];
        assert!(w.starts_with("OTEL_EXPORTER_OTLP_PROTOCOL=grpc, OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc: "), "{w}");
        assert!(w.contains("only http/protobuf") && w.contains("to http://env:4317/v1/traces "), "{w}");
        assert!(!w.contains("pw") && !w.contains("k=1"), "{w}");
        let fine = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:1"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
        ]);
        assert!(TelemetryConfig::default().target(&fine).unwrap().unwrap().warnings.is_empty());
    }

    #[test]
    fn an_exporter_other_than_otlp_or_none_is_warned_once_with_what_is_sent_instead() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://u:pw@env:4318?k=1"),
            ("OTEL_TRACES_EXPORTER", "zipkin"),
            ("OTEL_METRICS_EXPORTER", "otlp,console"),
        ]);
        let t = TelemetryConfig::default().target(&env).unwrap().unwrap();
        assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
        assert_eq!(
            t.warnings[0],
            "OTEL_TRACES_EXPORTER is `zipkin`: switchyard exports traces over OTLP only (`otlp`, or `none` for no traces), and sends them as OTLP/HTTP to http://env:4318/v1/traces all the same"
        );
        let w = &t.warnings[1];
        assert!(
            w.starts_with("OTEL_METRICS_EXPORTER is `otlp,console`: ")
                && w.contains("to http://env:4318/v1/metrics all"),
            "{w}"
        );
        assert!(t.warnings.iter().all(|w| !w.contains("pw") && !w.contains("k=1")), "{:?}", t.warnings);
        // otlp and none (any case) are switchyard's own; a signal that is off is not warned about.
        for (traces, metrics) in [("otlp", "OTLP"), ("None", "otlp"), ("console", "none")] {
            let env = env_of(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:1"),
                ("OTEL_TRACES_EXPORTER", traces),
                ("OTEL_METRICS_EXPORTER", metrics),
            ]);
            let t = TelemetryConfig::default().target(&env).unwrap().unwrap();
            let want = usize::from(traces == "console");
            assert_eq!(t.warnings.len(), want, "{traces} {metrics}: {:?}", t.warnings);
        }
        let odd = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:1"), ("OTEL_TRACES_EXPORTER", "a\nb")]);
        let w = &TelemetryConfig::default().target(&odd).unwrap().unwrap().warnings[0];
        assert!(w.starts_with("OTEL_TRACES_EXPORTER is `a\\nb`: ") && !w.contains('\n'), "{w}");
    }

    /// `console` (or any exporter) asked for with no endpoint: switchyard has no console
    /// exporter (its stdout carries the MCP protocol), and the signal goes nowhere; that is said
    /// once, with how to send it, and not when the user turned the signal or all off.
    #[test]
    fn an_exporter_asked_for_with_no_endpoint_is_warned_that_nothing_is_sent() {
        let t = TelemetryConfig::default().target(&env_of(&[("OTEL_TRACES_EXPORTER", "console")])).unwrap();
        let t = t.expect("a target with no URL that carries the warning");
        assert_eq!((t.traces_url.as_deref(), t.metrics_url.as_deref()), (None, None));
        assert_eq!(
            t.warnings,
            vec![
                "OTEL_TRACES_EXPORTER is `console`: switchyard prints no traces (its stdout carries the MCP protocol alone), it sends them over OTLP only, and no endpoint is set: traces go nowhere; set OTEL_EXPORTER_OTLP_ENDPOINT (e.g. http://127.0.0.1:4318) or [telemetry] endpoint"
            ]
        );
        let env = env_of(&[("OTEL_TRACES_EXPORTER", "otlp"), ("OTEL_METRICS_EXPORTER", "Console,zipkin")]);
        let t = TelemetryConfig::default().target(&env).unwrap().unwrap();
        assert_eq!(t.warnings.len(), 2, "{:?}", t.warnings);
        let w = &t.warnings;
        assert!(
            w[0].starts_with("OTEL_TRACES_EXPORTER is `otlp`, but no endpoint is set: traces go nowhere; set "),
            "{w:?}"
        );
        assert!(w[1].starts_with("OTEL_METRICS_EXPORTER is `Console,zipkin`: switchyard prints no metrics "), "{w:?}");
        // All of it fits in what `status` keeps of a warning (300 characters).
        assert!(w.iter().all(|w| w.chars().count() < 300), "{w:?}");
        // A table that names where traces go decides for metrics too: the fix is in the table.
        let env = env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:1"), ("OTEL_METRICS_EXPORTER", "zipkin")]);
        let t = table("traces_endpoint = \"http://file:3/v1/traces\"").target(&env).unwrap().unwrap();
        assert_eq!((t.traces_url.as_deref(), t.metrics_url.as_deref()), (Some("http://file:3/v1/traces"), None));
        assert_eq!(
            t.warnings,
            vec![
                "OTEL_METRICS_EXPORTER is `zipkin`: switchyard sends metrics over OTLP only, and no endpoint is set: metrics go nowhere; add endpoint or metrics_endpoint to [telemetry]"
            ]
        );
        // Off on purpose: nothing to say.
        for pairs in [
            &[("OTEL_TRACES_EXPORTER", "none")][..],
            &[("OTEL_TRACES_EXPORTER", "none"), ("OTEL_METRICS_EXPORTER", "none")],
            &[("OTEL_TRACES_EXPORTER", "console"), ("OTEL_SDK_DISABLED", "true")],
        ] {
            assert_eq!(TelemetryConfig::default().target(&env_of(pairs)).unwrap(), None, "{pairs:?}");
        }
        assert_eq!(table("enabled = false").target(&env_of(&[("OTEL_TRACES_EXPORTER", "console")])).unwrap(), None);
    }

    #[test]
    fn a_table_that_does_not_load_is_told_apart_from_one_that_is_not_there() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("switchyard.toml");
        std::fs::write(&file, "[telemetry]\nendpiont = \"http://h:1\"\n").unwrap();
        assert_eq!(TelemetryConfig::loaded_from_file(&file), None);
        assert_eq!(TelemetryConfig::from_file(&file).endpoint, None);
        std::fs::write(&file, "[servers.a]\ncommand = \"x\"\n").unwrap();
        assert_eq!(TelemetryConfig::loaded_from_file(&file).map(|t| t.endpoint), Some(None));
        assert!(TelemetryConfig::loaded_from_file(&dir.path().join("none")).is_some());
    }

    #[test]
    fn a_bad_url_in_the_file_is_said_with_its_file_and_line_as_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("switchyard.toml");
        for (text, key, shown) in [
            ("[telemetry]\n\nendpoint = \"ftp://h:1/x\"\n", "endpoint", "ftp://h:1/x"),
            (
                "[telemetry]\nendpoint = \"http://h:1\"\nmetrics_endpoint = \"not a url\"\n",
                "metrics_endpoint",
                "not a url",
            ),
        ] {
            std::fs::write(&file, text).unwrap();
            let e = TelemetryConfig::from_file(&file).target(&env_of(&[])).unwrap_err();
            let want = format!("config file {}, line 3: [telemetry] {key} is `{shown}`: ", file.display());
            assert!(e.starts_with(&want), "{e}");
        }
        std::fs::write(&file, "[telemetry]\nendpoint = \"http://h:1\"\nheaders = { k = \"${NOPE_UNSET}\" }\n").unwrap();
        let e = TelemetryConfig::from_file(&file).target(&env_of(&[])).unwrap_err();
        assert!(e.starts_with(&format!("config file {}, line 3: [telemetry] headers.k: ", file.display())), "{e}");
    }

    #[test]
    fn a_url_that_is_not_http_is_refused_by_name() {
        let e = table("endpoint = \"127.0.0.1:4317\"").target(&env_of(&[])).unwrap_err();
        assert!(e.starts_with("[telemetry] endpoint") && e.contains("http://"), "{e}");
        let e = TelemetryConfig::default().target(&env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://x")])).unwrap_err();
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT"), "{e}");
    }
}
