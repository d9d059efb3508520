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
        }
    }
}

/// Where traces go and how, as `[telemetry]` and the `OTEL_*` variables give it together.
#[derive(Clone, PartialEq, Eq)]
pub struct TelemetryTarget {
    /// The URL spans are posted to.
    pub traces_url: String,
    /// The URL the MCP durations are posted to (None: metrics are not exported).
    pub metrics_url: Option<String>,
    /// Headers of each export, `${VAR}` expanded (secrets: never logged, see the Debug impl).
    pub headers: Vec<(String, String)>,
    pub service_name: Option<String>,
    /// What was left out of the headers, for a warning at start: each names the entry by its
    /// place and key, never its value.
    pub warnings: Vec<String>,
}

impl TelemetryTarget {
    /// The URL for logs: without credentials, query or fragment.
    pub fn shown_url(&self) -> String {
        url::Url::parse(&self.traces_url).map_or_else(|_| "the collector".to_string(), |u| crate::display_url(&u))
    }
}

impl std::fmt::Debug for TelemetryTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("TelemetryTarget")
            .field("traces_url", &self.traces_url)
            .field("metrics_url", &self.metrics_url)
            .field("headers", &names)
            .field("service_name", &self.service_name)
            .field("warnings", &self.warnings)
            .finish()
    }
}

impl TelemetryConfig {
    /// The `[telemetry]` table of the config file at `path` alone, read before logging starts
    /// (the rest of the file is read, and its errors told, after): the defaults when the file
    /// is missing or does not parse.
    pub fn from_file(path: &std::path::Path) -> TelemetryConfig {
        #[derive(Deserialize)]
        struct Only {
            #[serde(default)]
            telemetry: TelemetryConfig,
        }
        let text = std::fs::read_to_string(path).unwrap_or_default();
        toml::from_str::<Only>(&text).map(|o| o.telemetry).unwrap_or_default()
    }

    /// Where traces go: the table's endpoint over the environment's (the per-signal URL over the
    /// base one in each), None when neither names one or `enabled = false` or
    /// `OTEL_SDK_DISABLED=true`. The error names the key or variable at fault, never a header's
    /// value.
    pub fn target(
        &self,
        env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
    ) -> Result<Option<TelemetryTarget>, String> {
        let var = |name: &str| env(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        if !self.enabled || var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let Some((url, from)) = self.signal_url("traces", &self.traces_endpoint, &var) else { return Ok(None) };
        checked_url(&url, from)?;
        let metrics_url = match self.signal_url("metrics", &self.metrics_endpoint, &var) {
            _ if var("OTEL_METRICS_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none")) => None,
            Some((url, from)) => Some(checked_url(&url, from).map(|()| url)?),
            None => None,
        };
        let mut headers = Vec::new();
        for (name, value) in &self.headers {
            check_header_name(name).map_err(|e| format!("[telemetry] headers: `{name}` {e}"))?;
            let v = expand(&value.raw, env).map_err(|e| format!("[telemetry] headers: `{name}` {e}"))?;
            headers.push((name.clone(), v.value));
        }
        // The variable's headers after the table's: a header named in both takes the variable's.
        let mut warnings = Vec::new();
        let from_env = ["OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"]
            .into_iter()
            .find_map(|n| env(n).ok().map(|v| (n, v)));
        if let Some((name, text)) = from_env {
            let (parsed, mut left_out) = env_headers(name, &text);
            for (k, v) in parsed {
                headers.retain(|(h, _)| !h.eq_ignore_ascii_case(&k));
                headers.push((k, v));
            }
            warnings.append(&mut left_out);
        }
        let service_name = self.service_name.clone().or_else(|| var("OTEL_SERVICE_NAME"));
        Ok(Some(TelemetryTarget { traces_url: url, metrics_url, headers, service_name, warnings }))
    }

    /// The URL of one `signal` (`traces`, `metrics`) and where it was given: the table's own
    /// URL for it, else the table's base endpoint with `/v1/SIGNAL`, else the same two from the
    /// environment. None when none of them is set.
    fn signal_url(
        &self,
        signal: &str,
        own: &Option<String>,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Option<(String, String)> {
        // The signal's path goes after the base URL's own path (its query, if any, stays last).
        let base = |url: String| match url::Url::parse(&url) {
            Ok(mut u) => {
                let path = format!("{}/v1/{signal}", u.path().trim_end_matches('/'));
                u.set_path(&path);
                u.to_string()
            }
            Err(_) => url,
        };
        let own_var = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.to_ascii_uppercase());
        // A table that names any endpoint decides for every signal: none is taken from the
        // environment then.
        let table_decides =
            self.endpoint.is_some() || self.traces_endpoint.is_some() || self.metrics_endpoint.is_some();
        match (own, &self.endpoint) {
            (Some(u), _) => Some((u.clone(), format!("[telemetry] {signal}_endpoint"))),
            (None, Some(u)) => Some((base(u.clone()), "[telemetry] endpoint".to_string())),
            (None, None) if table_decides => None,
            (None, None) => match (var(&own_var), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
                (Some(u), _) => Some((u, own_var)),
                (None, Some(u)) => Some((base(u), "OTEL_EXPORTER_OTLP_ENDPOINT".to_string())),
                (None, None) => None,
            },
        }
    }
}

/// `url` (given at `from`) if it is an HTTP(S) URL, else the error that says so.
fn checked_url(url: &str, from: String) -> Result<(), String> {
    if !(url.starts_with("http://") || url.starts_with("https://")) || url::Url::parse(url).is_err() {
        return Err(format!(
            "{from} is `{url}`: give the OTLP/HTTP collector's URL, e.g. http://127.0.0.1:4318 (traces and metrics are sent as HTTP/protobuf)"
        ));
    }
    Ok(())
}

/// The headers of `OTEL_EXPORTER_OTLP_HEADERS` (or its traces variant, `var`): `key=value`
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

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<String, std::env::VarError> {
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
        assert_eq!(t.traces_url, "http://127.0.0.1:4318/v1/traces");
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
        assert_eq!((t.traces_url.as_str(), t.service_name.as_deref()), ("http://env:2/traces", Some("from-env")));
        let t = table("endpoint = \"http://file:3\"\nservice_name = \"mine\"").target(&env).unwrap().unwrap();
        assert_eq!((t.traces_url.as_str(), t.service_name.as_deref()), ("http://file:3/v1/traces", Some("mine")));
        let t = table("endpoint = \"http://file:3\"\ntraces_endpoint = \"http://file:4/x\"").target(&env).unwrap();
        assert_eq!(t.unwrap().traces_url, "http://file:4/x");
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
        assert_eq!((t.traces_url.as_str(), t.metrics_url), ("http://file:4/x", None));
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
        assert_eq!((t.traces_url.as_str(), t.metrics_url), ("http://env:1/v1/traces", None));
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
        assert_eq!(t.headers, vec![("x-api-key".to_string(), "k s3cret".to_string())]);
        let t = table("endpoint = \"https://u:pw@h:1/?key=k\"").target(&env).unwrap().unwrap();
        assert_eq!(t.shown_url(), "https://h:1/v1/traces");
        assert_eq!(t.traces_url, "https://u:pw@h:1/v1/traces?key=k");
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
    fn the_traces_variable_comes_before_the_general_one_and_over_the_table() {
        let env = env_of(&[
            ("OTEL_EXPORTER_OTLP_HEADERS", "k=general"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "K=traces,oops"),
        ]);
        let t =
            table("endpoint = \"http://h:1\"\nheaders = { k = \"table\", j = \"t\" }").target(&env).unwrap().unwrap();
        assert_eq!(t.headers, [("j", "t"), ("K", "traces")].map(|(k, v)| (k.to_string(), v.to_string())));
        assert_eq!(t.warnings.len(), 1, "{:?}", t.warnings);
        assert!(t.warnings[0].starts_with("OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 2 "), "{:?}", t.warnings);
        let e = table("endpoint = \"http://h:1\"\nheaders = { k = \"a\\nb\" }").target(&env).unwrap_err();
        assert!(e.contains("`k`") && !e.contains("a\nb"), "{e}");
    }

    #[test]
    fn a_url_that_is_not_http_is_refused_by_name() {
        let e = table("endpoint = \"127.0.0.1:4317\"").target(&env_of(&[])).unwrap_err();
        assert!(e.starts_with("[telemetry] endpoint") && e.contains("http://"), "{e}");
        let e = TelemetryConfig::default().target(&env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://x")])).unwrap_err();
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT"), "{e}");
    }
}
