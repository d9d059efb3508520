//! `[groups.NAME]`: servers a client reaches as one MCP server (`switchyard connect --group
//! NAME`, the HTTP front's `/groups/NAME/mcp`), their tools and prompts named
//! `PREFIX SEPARATOR NAME`, and the implicit group [`ALL`] of every server.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::server::check_server_name;

/// The implicit group of every server of the file. A `[groups.all]` table may set its
/// separator and prefixes (and, if it lists `servers`, which ones it has).
pub const ALL: &str = "all";

/// The separator between a server's prefix and its tool's or prompt's name when a group sets
/// none: two underscores, valid in every client's tool names.
pub const DEFAULT_SEPARATOR: &str = "__";

/// One `[groups.NAME]` table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupConfig {
    /// The servers in it, in the order their tools are listed. Required, except for [`ALL`]
    /// (absent: every server).
    #[serde(default)]
    pub servers: Option<Vec<String>>,
    /// Between a server's prefix and its tool's or prompt's name (default [`DEFAULT_SEPARATOR`]).
    #[serde(default)]
    pub separator: Option<String>,
    /// The prefix of a server's tools and prompts, by server (default: the server's name).
    #[serde(default)]
    pub prefix: BTreeMap<String, String>,
    /// `expose = "search"`: the group's clients get `search_tools` and `call_tool` over its
    /// tools instead of its list (docs/search.md); None: as each client's budget says.
    #[serde(default)]
    pub expose: Option<crate::Expose>,
}

/// One member of a group as its sessions use it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub server: String,
    pub prefix: String,
}

/// A group as a session serves it: its members, and how their names are joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub name: String,
    pub members: Vec<Member>,
    pub separator: String,
    /// How its tools are given to clients (see [`GroupConfig::expose`]).
    pub expose: Option<crate::Expose>,
}

/// The characters a prefix or a separator may have: those every client takes in tool names.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl GroupConfig {
    /// Checks the table of group `name` against the file's servers `known`, and gives the
    /// group it describes. Prefixes never hold the separator, so a name splits at its first
    /// separator into exactly one prefix: two servers' names can never collide.
    pub fn resolve(&self, name: &str, known: &[String]) -> Result<Group, String> {
        check_server_name(name).map_err(|e| {
            format!("the group name `{}` {}", name.escape_debug(), e.replace("server name", "group name"))
        })?;
        let separator = self.separator.clone().unwrap_or_else(|| DEFAULT_SEPARATOR.to_string());
        if separator.is_empty() || !separator.chars().all(name_char) {
            return Err(format!(
                "group `{name}`: separator {separator:?} must be one or more ASCII letters, digits, `_` or `-` (the characters every client takes in a tool name); the default is {DEFAULT_SEPARATOR:?}"
            ));
        }
        let servers: Vec<String> = match (&self.servers, name) {
            (Some(s), _) => s.clone(),
            (None, ALL) => known.to_vec(),
            (None, _) => {
                return Err(format!(
                    "group `{name}` lists no servers: add `servers = [\"a\", \"b\"]` to [groups.{name}]"
                ));
            }
        };
        if servers.is_empty() && name != ALL {
            return Err(format!("group `{name}` has an empty `servers` list: name at least one server"));
        }
        for (n, s) in servers.iter().enumerate() {
            if !known.contains(s) {
                return Err(format!(
                    "group `{name}` names server `{}`, which the file does not have (it has: {})",
                    s.escape_debug(),
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ));
            }
            if servers[..n].contains(s) {
                return Err(format!("group `{name}` lists server `{s}` twice"));
            }
        }
        if let Some(other) = self.prefix.keys().find(|k| !servers.contains(k)) {
            return Err(format!(
                "group `{name}`: `prefix` names server `{}`, which is not in the group",
                other.escape_debug()
            ));
        }
        let mut members: Vec<Member> = Vec::new();
        for server in servers {
            let prefix = self.prefix.get(&server).cloned().unwrap_or_else(|| server.clone());
            if prefix.is_empty() || !prefix.chars().all(name_char) {
                return Err(format!(
                    "group `{name}`: the prefix {prefix:?} of server `{server}` must be one or more ASCII letters, digits, `_` or `-`; set one in [groups.{name}.prefix]"
                ));
            }
            if prefix.contains(&separator) {
                return Err(format!(
                    "group `{name}`: the prefix {prefix:?} of server `{server}` holds the separator {separator:?}, so its tools' names could be read two ways; set [groups.{name}] separator to something else, or give it a prefix in [groups.{name}.prefix]"
                ));
            }
            if let Some(m) = members.iter().find(|m| m.prefix == prefix) {
                return Err(format!(
                    "group `{name}`: servers `{}` and `{server}` have the same prefix {prefix:?}",
                    m.server
                ));
            }
            members.push(Member { server, prefix });
        }
        Ok(Group { name: name.to_string(), members, separator, expose: self.expose })
    }
}

/// Every group of a file: its `[groups.NAME]` tables and the implicit [`ALL`] (unless a
/// `[groups.all]` table sets it), checked against the file's servers `known`.
pub fn resolve_groups(
    groups: &BTreeMap<String, GroupConfig>,
    known: &[String],
) -> Result<BTreeMap<String, Group>, String> {
    let mut out = BTreeMap::new();
    for (name, g) in groups {
        out.insert(name.clone(), g.resolve(name, known)?);
    }
    if !out.contains_key(ALL) {
        // The implicit group takes every server; one whose name holds the separator is
        // prefixed with its name made safe, so a file with such a server still loads.
        let all = GroupConfig::default();
        match all.resolve(ALL, known) {
            Ok(g) => {
                out.insert(ALL.to_string(), g);
            }
            Err(_) => {
                let prefix = known
                    .iter()
                    .filter(|s| s.contains(DEFAULT_SEPARATOR) || s.contains('.'))
                    .map(|s| (s.clone(), s.replace('.', "-").replace(DEFAULT_SEPARATOR, "_-")))
                    .collect();
                if let Ok(g) = (GroupConfig { prefix, ..all }).resolve(ALL, known) {
                    out.insert(ALL.to_string(), g);
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> Vec<String> {
        ["fs", "memory", "git"].map(String::from).to_vec()
    }

    #[test]
    fn a_group_has_its_servers_in_order_with_their_names_as_prefixes() {
        let g = GroupConfig { servers: Some(vec!["memory".into(), "fs".into()]), ..Default::default() };
        let g = g.resolve("work", &known()).unwrap();
        assert_eq!(g.separator, "__");
        assert_eq!(
            g.members,
            vec![
                Member { server: "memory".into(), prefix: "memory".into() },
                Member { server: "fs".into(), prefix: "fs".into() }
            ]
        );
    }

    #[test]
    fn a_groups_expose_reads_into_the_group() {
        let g: GroupConfig = toml::from_str("servers = [\"fs\"]\nexpose = \"search\"").expect("parses");
        assert_eq!(g.resolve("g", &known()).expect("resolves").expose, Some(crate::Expose::Search));
        assert!(toml::from_str::<GroupConfig>("servers = [\"fs\"]\nexpose = \"some\"").is_err());
    }

    #[test]
    fn names_that_could_be_read_two_ways_are_refused() {
        let with = |sep: &str, prefix: &[(&str, &str)]| GroupConfig {
            servers: Some(vec!["fs".into(), "memory".into()]),
            separator: Some(sep.into()),
            prefix: prefix.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect(),
            ..Default::default()
        };
        let e = with("_", &[("fs", "my_fs")]).resolve("g", &known()).unwrap_err();
        assert!(e.contains("holds the separator") && e.contains("my_fs"), "{e}");
        let e = with("__", &[("fs", "m"), ("memory", "m")]).resolve("g", &known()).unwrap_err();
        assert!(e.contains("the same prefix"), "{e}");
        let e = with("::", &[]).resolve("g", &known()).unwrap_err();
        assert!(e.contains("separator"), "{e}");
        assert!(with("-", &[("fs", "files")]).resolve("g", &known()).is_ok());
    }

    #[test]
    fn unknown_or_missing_servers_are_named() {
        let e = GroupConfig { servers: Some(vec!["nope".into()]), ..Default::default() }
            .resolve("g", &known())
            .unwrap_err();
        assert!(e.contains("`nope`") && e.contains("fs, memory, git"), "{e}");
        let e = GroupConfig::default().resolve("g", &known()).unwrap_err();
        assert!(e.contains("servers = ["), "{e}");
        let e = GroupConfig { servers: Some(vec!["fs".into(), "fs".into()]), ..Default::default() }
            .resolve("g", &known())
            .unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn the_implicit_group_has_every_server_and_a_table_may_set_it() {
        let groups = resolve_groups(&BTreeMap::new(), &known()).unwrap();
        assert_eq!(groups[ALL].members.len(), 3);
        let set =
            BTreeMap::from([(ALL.to_string(), GroupConfig { separator: Some("-".into()), ..Default::default() })]);
        let groups = resolve_groups(&set, &known()).unwrap();
        assert_eq!((groups[ALL].members.len(), groups[ALL].separator.as_str()), (3, "-"));
        // A server whose name holds the separator still gets a group of all.
        let odd = vec!["a__b".to_string(), "a".to_string(), "x.y".to_string()];
        let all = &resolve_groups(&BTreeMap::new(), &odd).unwrap()[ALL];
        assert!(all.members.iter().all(|m| !m.prefix.contains("__") && !m.prefix.contains('.')), "{all:?}");
    }
}
