//! A remote server's sign-in settings: `oauth = false`, `oauth = true`, or an `oauth` table.

use std::fmt;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

/// `login_timeout_ms` when not given: a minute for the browser step.
pub const DEFAULT_LOGIN_TIMEOUT_MS: u64 = 60_000;

/// How switchyard signs in to a remote server that asks for it (the MCP authorization flow).
/// Without the key, sign-in is on for a server with no `Authorization` header configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OAuthConfig {
    /// `oauth = false` turns sign-in off.
    #[serde(skip)]
    pub enabled: bool,
    /// A client id registered by hand with the authorization server (else one is registered
    /// dynamically).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Its secret; `${VAR}` reads it from the environment (never write it in the file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// An https URL of a Client ID Metadata Document for switchyard, used as the client id
    /// where the authorization server supports them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_metadata_url: Option<String>,
    /// Scopes asked for instead of those the server names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// How long calls wait for a sign-in in the browser before they are answered with an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login_timeout_ms: Option<u64>,
    /// Whether a sign-in starts the browser (`$BROWSER`, else the platform's opener).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_browser: Option<bool>,
    /// The port of 127.0.0.1 the redirect comes back to, for a client registered by hand with
    /// a redirect URI of a fixed port (else a free port is taken for each sign-in).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redirect_port: Option<u16>,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            enabled: true,
            client_id: None,
            client_secret: None,
            client_metadata_url: None,
            scopes: Vec::new(),
            login_timeout_ms: None,
            open_browser: None,
            redirect_port: None,
        }
    }
}

impl OAuthConfig {
    pub fn login_timeout_ms(&self) -> u64 {
        self.login_timeout_ms.unwrap_or(DEFAULT_LOGIN_TIMEOUT_MS)
    }

    pub fn open_browser(&self) -> bool {
        self.open_browser.unwrap_or(true)
    }

    /// What is wrong with the settings; the error completes "`oauth` ...".
    pub fn check(&self) -> Result<(), String> {
        if self.client_secret.is_some() && self.client_id.is_none() {
            return Err("has client_secret without client_id: the secret goes with a pre-registered client id".into());
        }
        if let Some(secret) = &self.client_secret
            && !secret.contains("${")
        {
            return Err(
                "client_secret is written in the file itself: give it as \"${VAR}\" and set VAR in the environment"
                    .into(),
            );
        }
        if let Some(u) = &self.client_metadata_url {
            match url::Url::parse(u) {
                Ok(p) if p.scheme() == "https" && p.path() != "/" => {}
                _ => return Err(format!("client_metadata_url {u:?} must be an https URL with a path")),
            }
        }
        if self.redirect_port == Some(0) {
            return Err("redirect_port must be a port from 1 to 65535 (leave it out for a free port each time)".into());
        }
        if self.login_timeout_ms == Some(0) {
            return Err("login_timeout_ms must be more than 0".into());
        }
        if let Some(s) = self.scopes.iter().find(|s| s.is_empty() || s.contains(char::is_whitespace)) {
            return Err(format!("scopes has {s:?}: each scope is one word"));
        }
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    client_id: Option<String>,
    client_secret: Option<String>,
    client_metadata_url: Option<String>,
    #[serde(default)]
    scopes: Vec<String>,
    login_timeout_ms: Option<u64>,
    open_browser: Option<bool>,
    redirect_port: Option<u16>,
}

impl<'de> Deserialize<'de> for OAuthConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(OAuthVisitor)
    }
}

struct OAuthVisitor;

impl<'de> Visitor<'de> for OAuthVisitor {
    type Value = OAuthConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("true, false, or a table of sign-in settings")
    }

    fn visit_bool<E: serde::de::Error>(self, on: bool) -> Result<OAuthConfig, E> {
        Ok(OAuthConfig { enabled: on, ..OAuthConfig::default() })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<OAuthConfig, A::Error> {
        let t = Table::deserialize(MapAccessDeserializer::new(map))?;
        Ok(OAuthConfig {
            enabled: true,
            client_id: t.client_id,
            client_secret: t.client_secret,
            client_metadata_url: t.client_metadata_url,
            scopes: t.scopes,
            login_timeout_ms: t.login_timeout_ms,
            open_browser: t.open_browser,
            redirect_port: t.redirect_port,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct Holder {
        oauth: OAuthConfig,
    }

    #[test]
    fn reads_a_bool_or_a_table() {
        let off: Holder = toml::from_str("oauth = false").unwrap();
        assert!(!off.oauth.enabled);
        let t: Holder = toml::from_str(
            "[oauth]\nclient_id = \"c\"\nclient_secret = \"${S}\"\nscopes = [\"a\"]\nlogin_timeout_ms = 5\n",
        )
        .unwrap();
        assert!(t.oauth.enabled);
        assert_eq!(t.oauth.client_id.as_deref(), Some("c"));
        assert_eq!(t.oauth.login_timeout_ms(), 5);
        assert!(t.oauth.check().is_ok());
        let port: Holder = toml::from_str("[oauth]\nclient_id = \"c\"\nredirect_port = 8976\n").unwrap();
        assert_eq!(port.oauth.redirect_port, Some(8976));
        let zero: Holder = toml::from_str("[oauth]\nredirect_port = 0\n").unwrap();
        assert!(zero.oauth.check().unwrap_err().contains("redirect_port must be a port from 1 to 65535"));
        assert!(toml::from_str::<Holder>("[oauth]\nredirect_port = 70000\n").is_err());
        let e = toml::from_str::<Holder>("[oauth]\nclient = \"c\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `client`"), "{e}");
    }

    #[test]
    fn a_secret_in_the_file_or_without_an_id_is_refused() {
        let plain =
            OAuthConfig { client_id: Some("c".into()), client_secret: Some("s3cr3t".into()), ..OAuthConfig::default() };
        assert!(plain.check().unwrap_err().contains("${VAR}"));
        let alone = OAuthConfig { client_secret: Some("${S}".into()), ..OAuthConfig::default() };
        assert!(alone.check().unwrap_err().contains("without client_id"));
        let cimd = OAuthConfig { client_metadata_url: Some("http://x/c.json".into()), ..OAuthConfig::default() };
        assert!(cimd.check().is_err());
    }
}
