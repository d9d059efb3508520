//! A server's launch keys, what `[server]` and each `[servers.NAME]` say about what runs, and how
//! a table that holds them beside keys of its own is read.

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;

use serde::de::value::{MapAccessDeserializer, StrDeserializer};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::oauth::OAuthConfig;
use crate::server::TransportKind;
use crate::vars::HeaderValue;

/// How to start or reach a server: a `command` switchyard starts, or a `url` it connects to.
/// [`ServerConfig`] (`[server]`) and [`ServerEntry`] (`[servers.NAME]`) hold these keys beside
/// keys of their own (`config.server.launch.url`).
///
/// [`ServerConfig`]: crate::ServerConfig
/// [`ServerEntry`]: crate::ServerEntry
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Launch {
    /// A server switchyard starts and talks to over its stdin and stdout: the program.
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<PathBuf>,
    /// A remote server: its MCP endpoint (Streamable HTTP) or SSE stream (legacy SSE).
    pub url: Option<String>,
    /// How to reach `url` (default auto).
    pub transport: Option<TransportKind>,
    /// Sent with every request to `url`; `${VAR}` in a value is read from the environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", serialize_with = "raw_values")]
    pub headers: BTreeMap<String, HeaderValue>,
    /// Names whose values the connecting client supplies (`connect NAME --env A,B`); `${NAME}` in
    /// command, args, env values, cwd, url and header values stands for the client's value. A
    /// server with any is a template, only in `[servers.NAME]`, and only the daemon serves it
    /// (see [`Config::for_client`]).
    ///
    /// [`Config::for_client`]: crate::Config::for_client
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub client_env: Vec<String>,
    /// Which clients share an instance of the server (default `profile`): see [`Share`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<Share>,
    /// Signing in to `url` when it asks (the MCP authorization flow): `false`, `true`, or a
    /// table of settings. Without it, on unless an `Authorization` header is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthConfig>,
}

/// Which clients share the instances of a server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Share {
    /// Every client shares them: the first client's initialize, capabilities and roots are
    /// what the server sees for all.
    All,
    /// Clients the server cannot tell apart share them: the same protocol version, declared
    /// capabilities, roots and client values, or differences the server has shown it ignores
    /// (it answered both alike and never asked a client for what they differ in; see
    /// docs/daemon.md). A client that differs otherwise gets instances of its own.
    #[default]
    Profile,
    /// As `profile`, and each client (its `connect` entry: client name and project directory)
    /// gets instances of its own, kept across its reconnects until they idle out.
    Client,
    /// Each session gets instances of its own, which stop when it ends.
    Session,
}

impl Share {
    pub fn as_str(self) -> &'static str {
        match self {
            Share::All => "all",
            Share::Profile => "profile",
            Share::Client => "client",
            Share::Session => "session",
        }
    }
}

impl Launch {
    /// The keys, in the order of the fields (a test holds them to the struct).
    pub const KEYS: &'static [&'static str] =
        &["command", "args", "env", "cwd", "url", "transport", "headers", "client_env", "share", "oauth"];
}

/// Header values as written (`${VAR}` unexpanded).
fn raw_values<S: Serializer>(headers: &BTreeMap<String, HeaderValue>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_map(headers.iter().map(|(name, value)| (name, &value.raw)))
}

/// A table of the launch keys and keys of its own (`[server]`, `[servers.NAME]`), which reads as
/// its launch keys. It is read in one pass, so that an unknown key is an error at that key and a
/// bad value one at that value, as from a derived `deny_unknown_fields` struct (with
/// `#[serde(flatten)]`, unknown keys would pass, and a flattened value's error lose its place).
pub(crate) trait WithLaunch: Default {
    /// The type's name, for "expected struct NAME".
    const NAME: &'static str;
    /// Every key, the launch keys among them, in the order an unknown key's error lists them
    /// (see [`keys`]).
    const KEYS: &'static [&'static str];
    /// Reads the value of `key`, one of `KEYS` but not of the launch keys.
    fn read_value<'de, A: MapAccess<'de>>(&mut self, key: &'static str, map: &mut A) -> Result<(), A::Error>;
    /// Where its launch keys go.
    fn launch_mut(&mut self) -> &mut Launch;
}

/// `before`, the launch keys, then `after`: the keys of a [`WithLaunch`] table.
pub(crate) const fn keys<const N: usize>(before: &[&'static str], after: &[&'static str]) -> [&'static str; N] {
    let mut out = [""; N];
    let parts = [before, Launch::KEYS, after];
    let mut n = 0;
    let mut p = 0;
    while p < parts.len() {
        let mut i = 0;
        while i < parts[p].len() {
            out[n] = parts[p][i];
            n += 1;
            i += 1;
        }
        p += 1;
    }
    assert!(n == N, "N is the number of keys");
    out
}

/// Reads a [`WithLaunch`] table.
pub(crate) fn deserialize<'de, D: Deserializer<'de>, T: WithLaunch>(d: D) -> Result<T, D::Error> {
    d.deserialize_struct(T::NAME, T::KEYS, TableVisitor(PhantomData))
}

struct TableVisitor<T>(PhantomData<T>);

impl<'de, T: WithLaunch> Visitor<'de> for TableVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "struct {}", T::NAME)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        let mut table = T::default();
        let launch = Launch::deserialize(MapAccessDeserializer::new(LaunchKeys { map, table: &mut table }))?;
        *table.launch_mut() = launch;
        Ok(table)
    }
}

/// A table's launch keys, for [`Launch`]'s own Deserialize; its other keys go to `table` on the way.
struct LaunchKeys<'t, A, T> {
    map: A,
    table: &'t mut T,
}

impl<'de, A: MapAccess<'de>, T: WithLaunch> MapAccess<'de> for LaunchKeys<'_, A, T> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        while let Some(key) = self.map.next_key_seed(Key(T::KEYS))? {
            if Launch::KEYS.contains(&key) {
                return seed.deserialize(StrDeserializer::new(key)).map(Some);
            }
            self.table.read_value(key, &mut self.map)?;
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// A key of a table whose keys are `.0`: another is an error at that key that lists them.
struct Key(&'static [&'static str]);

impl<'de> DeserializeSeed<'de> for Key {
    type Value = &'static str;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<&'static str, D::Error> {
        d.deserialize_identifier(self)
    }
}

impl Visitor<'_> for Key {
    type Value = &'static str;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field identifier")
    }

    fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<&'static str, E> {
        self.0.iter().copied().find(|k| *k == key).ok_or_else(|| E::unknown_field(key, self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_are_the_fields_in_order() {
        // serde lists a struct's fields when it refuses an unknown one.
        let e = toml::from_str::<Launch>("not_a_key = 1\n").unwrap_err();
        let fields = Launch::KEYS.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
        assert!(e.message().ends_with(&format!("expected one of {fields}")), "{e}");
    }

    #[test]
    fn a_launch_written_out_reads_back_the_same() {
        let text = "command = \"npx\"\nargs = [\"-y\"]\nenv = { A = \"1\" }\ncwd = \"/w\"\nclient_env = [\"A\"]\n";
        let launch: Launch = toml::from_str(text).unwrap();
        assert_eq!(toml::to_string(&launch).unwrap().parse::<toml::Table>(), text.parse::<toml::Table>());
        let remote = "url = \"https://h/\"\ntransport = \"streamable-http\"\nheaders = { A = \"${B}\" }\n";
        let launch: Launch = toml::from_str(remote).unwrap();
        assert_eq!(toml::Table::try_from(&launch).unwrap(), remote.parse::<toml::Table>().unwrap());
        assert_eq!(toml::Table::try_from(Launch::default()).unwrap(), toml::Table::new());
    }
}
