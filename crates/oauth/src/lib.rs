//! The client side of MCP authorization for remote servers: on a 401, discovery (RFC 9728 and
//! RFC 8414), a client identity (pre-registered, a Client ID Metadata Document, or dynamic
//! registration per RFC 7591, in the spec's order), the authorization code flow with PKCE
//! (S256), `state`, `iss` (RFC 9207) and `resource` (RFC 8707) through a browser and a loopback
//! redirect, then refresh before expiry and step-up on `insufficient_scope`.
//!
//! One [`Auth`] per server URL holds its tokens (kept in a 0600 file, see [`store`]); one
//! sign-in at a time runs for it, and requests that hit a 401 meanwhile wait for that one.

pub mod challenge;
pub mod discover;
pub mod redirect;
pub mod secret;
pub mod store;
mod token;

mod auth;
mod authorize;
mod error;
mod http;
mod refresh;
mod register;
mod settings;
mod sign_in;
mod status;

pub use auth::Auth;
pub use authorize::Announce;
pub use challenge::Challenge;
pub use error::{Error, Step};
pub use http::{describe, shown};
pub use secret::Secret;
pub use settings::Settings;
pub use status::{State, Status};
pub use store::{Registration, Store, Stored, Tokens};

#[cfg(test)]
mod tests;
