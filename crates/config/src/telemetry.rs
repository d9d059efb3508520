//! `[telemetry]`: where switchyard sends its traces (OTLP over HTTP), read once at start.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::vars::{HeaderValue, check_header_name, expand};

/// `[telemetry]`. Traces go out only when an endpoint is given, here or in
/// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// `false` keeps traces off even when the environment names an endpoint.
    pub enabled: bool,
    /// The OTLP/HTTP collector's base URL (`/v1/traces` is added), e.g. `http://127.0.0.1:4318`.
    pub endpoint: Option<String>,
    /// The full URL traces are posted to, as given (over `endpoint`).
    pub traces_endpoint: Option<String>,
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
    /// Headers of each export, `${VAR}` expanded (secrets: never logged, see the Debug impl).
    pub headers: Vec<(String, String)>,
    pub service_name: Option<String>,
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
            .field("headers", &names)
            .field("service_name", &self.service_name)
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
        // The signal's path goes after the base URL's own path (its query, if any, stays last).
        let base = |url: String| match url::Url::parse(&url) {
            Ok(mut u) => {
                let path = format!("{}/v1/traces", u.path().trim_end_matches('/'));
                u.set_path(&path);
                u.to_string()
            }
            Err(_) => url,
        };
        let (url, from) = match (&self.traces_endpoint, &self.endpoint) {
            (Some(u), _) => (u.clone(), "[telemetry] traces_endpoint"),
            (None, Some(u)) => (base(u.clone()), "[telemetry] endpoint"),
            (None, None) => match (var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), var("OTEL_EXPORTER_OTLP_ENDPOINT")) {
                (Some(u), _) => (u, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
                (None, Some(u)) => (base(u), "OTEL_EXPORTER_OTLP_ENDPOINT"),
                (None, None) => return Ok(None),
            },
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) || url::Url::parse(&url).is_err() {
            return Err(format!(
                "{from} is `{url}`: give the OTLP/HTTP collector's URL, e.g. http://127.0.0.1:4318 (traces are sent as HTTP/protobuf)"
            ));
        }
        let mut headers = Vec::new();
        for (name, value) in &self.headers {
            check_header_name(name).map_err(|e| format!("[telemetry] headers: `{name}` {e}"))?;
            let v = expand(&value.raw, env).map_err(|e| format!("[telemetry] headers: `{name}` {e}"))?;
            headers.push((name.clone(), v.value));
        }
        let service_name = self.service_name.clone().or_else(|| var("OTEL_SERVICE_NAME"));
        Ok(Some(TelemetryTarget { traces_url: url, headers, service_name }))
    }
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
    fn a_url_that_is_not_http_is_refused_by_name() {
        let e = table("endpoint = \"127.0.0.1:4317\"").target(&env_of(&[])).unwrap_err();
        assert!(e.starts_with("[telemetry] endpoint") && e.contains("http://"), "{e}");
        let e = TelemetryConfig::default().target(&env_of(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "grpc://x")])).unwrap_err();
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_ENDPOINT"), "{e}");
    }
}
