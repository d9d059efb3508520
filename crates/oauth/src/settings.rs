//! A server's sign-in settings (`[servers.NAME.oauth]`), as the configuration hands them over.

use std::time::Duration;

use crate::Secret;

/// How a server's sign-in is set up (`[servers.NAME.oauth]`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// A client id registered by hand with the authorization server (used first).
    pub client_id: Option<String>,
    /// Its secret, for a confidential client.
    pub client_secret: Option<Secret>,
    /// The URL of a Client ID Metadata Document describing switchyard, used as the client id
    /// where the authorization server supports them.
    pub client_metadata_url: Option<String>,
    /// Scopes asked for instead of those the server names.
    pub scopes: Vec<String>,
    /// How long a sign-in may wait for the browser.
    pub login_timeout: Duration,
    /// Whether a sign-in starts the browser (else it only names the URL).
    pub open_browser: bool,
    /// The port of 127.0.0.1 the redirect must come back to (a client registered by hand with
    /// a fixed redirect URI); None: a free port each time.
    pub redirect_port: Option<u16>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            client_id: None,
            client_secret: None,
            client_metadata_url: None,
            scopes: Vec::new(),
            login_timeout: Duration::from_secs(60),
            open_browser: true,
            redirect_port: None,
        }
    }
}
