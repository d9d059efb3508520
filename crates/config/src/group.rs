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

/// The key of a `[groups.NAME]` table an error is about, to find its line in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GroupKey {
    /// The table itself.
    Table,
    /// `servers`, or its entry `n`.
    Servers(Option<usize>),
    Separator,
    /// The entry of server `s` in `prefix`.
    Prefix(String),
}

/// What is wrong with a group's table, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupFault {
    pub(crate) key: GroupKey,
    pub(crate) message: String,
}

fn fault(key: GroupKey, message: String) -> GroupFault {
    GroupFault { key, message }
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
        self.resolve_keyed(name, known).map_err(|f| f.message)
    }

    /// [`GroupConfig::resolve`], the error with the key it is about.
    pub(crate) fn resolve_keyed(&self, name: &str, known: &[String]) -> Result<Group, GroupFault> {
        check_server_name(name).map_err(|e| {
            let e = e.replace("server name", "group name");
            fault(GroupKey::Table, format!("the group name `{}` {e}", name.escape_debug()))
        })?;
        let separator = self.separator.clone().unwrap_or_else(|| DEFAULT_SEPARATOR.to_string());
        if separator.is_empty() || !separator.chars().all(name_char) {
            return Err(fault(
                GroupKey::Separator,
                format!(
                    "group `{name}`: separator {separator:?} must be one or more ASCII letters, digits, `_` or `-` (the characters every client takes in a tool name); the default is {DEFAULT_SEPARATOR:?}"
                ),
            ));
        }
        let servers: Vec<String> = match (&self.servers, name) {
            (Some(s), _) => s.clone(),
            (None, ALL) => known.to_vec(),
            (None, _) => {
                return Err(fault(
                    GroupKey::Table,
                    format!("group `{name}` lists no servers: add `servers = [\"a\", \"b\"]` to [groups.{name}]"),
                ));
            }
        };
        if servers.is_empty() && name != ALL {
            return Err(fault(
                GroupKey::Servers(None),
                format!("group `{name}` has an empty `servers` list: name at least one server"),
            ));
        }
        for (n, s) in servers.iter().enumerate() {
            if !known.contains(s) {
                return Err(fault(
                    GroupKey::Servers(Some(n)),
                    format!(
                        "group `{name}` names server `{}`, which the file does not have (it has: {})",
                        s.escape_debug(),
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                ));
            }
            if servers[..n].contains(s) {
                return Err(fault(GroupKey::Servers(Some(n)), format!("group `{name}` lists server `{s}` twice")));
            }
        }
        if let Some(other) = self.prefix.keys().find(|k| !servers.contains(k)) {
            return Err(fault(
                GroupKey::Prefix(other.clone()),
                format!(
                    "group `{name}`: `prefix` names server `{}`, which is not in the group: remove it from [groups.{name}.prefix] or add the server to `servers`",
                    other.escape_debug()
                ),
            ));
        }
        let mut members: Vec<Member> = Vec::new();
        for server in servers {
            let set = self.prefix.get(&server).cloned();
            let prefix = set.clone().unwrap_or_else(|| server.clone());
            // Where the prefix comes from: its entry in `prefix`, else the server's name in `servers`.
            let (key, change) = match &set {
                Some(_) => (
                    GroupKey::Prefix(server.clone()),
                    format!("change `{server} = {prefix:?}` in [groups.{name}.prefix]"),
                ),
                None => (
                    GroupKey::Servers(self.servers.iter().flatten().position(|s| *s == server)),
                    format!("give the server a prefix in [groups.{name}.prefix] (`\"{server}\" = \"...\"`)"),
                ),
            };
            if prefix.is_empty() || !prefix.chars().all(name_char) {
                return Err(fault(
                    key,
                    format!(
                        "group `{name}`: the prefix {prefix:?} of server `{server}` must be one or more ASCII letters, digits, `_` or `-`: {change}"
                    ),
                ));
            }
            if prefix.contains(&separator) {
                return Err(fault(
                    key,
                    format!(
                        "group `{name}`: the prefix {prefix:?} of server `{server}` holds the separator {separator:?}, so its tools' names could be read two ways: {change} to one without {separator:?}, or set another `separator` in [groups.{name}]"
                    ),
                ));
            }
            if let Some(m) = members.iter().find(|m| m.prefix == prefix) {
                return Err(fault(
                    key,
                    format!(
                        "group `{name}`: servers `{}` and `{server}` have the same prefix {prefix:?}: {change} to one of its own",
                        m.server
                    ),
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
    resolve_groups_keyed(groups, known).map_err(|(_, f)| f.message)
}

/// [`resolve_groups`], the error with its group's name and the key it is about.
pub(crate) fn resolve_groups_keyed(
    groups: &BTreeMap<String, GroupConfig>,
    known: &[String],
) -> Result<BTreeMap<String, Group>, (String, GroupFault)> {
    let mut out = BTreeMap::new();
    for (name, g) in groups {
        out.insert(name.clone(), g.resolve_keyed(name, known).map_err(|f| (name.clone(), f))?);
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

    /// Found from outside: errors about a group's content named no line, where syntax errors
    /// do; and a prefix set in `[groups.NAME.prefix]` was told to be set there.
    #[test]
    fn errors_about_a_groups_content_name_the_line_of_their_key() {
        let servers =
            "[servers.fs]\ncommand = \"a\"\n[servers.memory]\ncommand = \"b\"\n[servers.my__fs]\ncommand = \"c\"\n";
        for (group, line, says) in [
            ("[groups.g]\nservers = [\n  \"fs\",\n  \"memroy\",\n]\n", 10, "names server `memroy`"),
            ("[groups.g]\nservers = []\n", 8, "empty `servers` list"),
            ("[groups.g]\n", 7, "lists no servers"),
            ("[groups.g]\nservers = [\"fs\"]\nseparator = \".\"\n", 9, "separator \".\""),
            ("[groups.g]\nservers = [\"fs\", \"my__fs\"]\n", 8, "give the server a prefix in [groups.g.prefix]"),
            (
                "[groups.g]\nservers = [\"fs\", \"memory\"]\n[groups.g.prefix]\nmemory = \"my__m\"\n",
                10,
                "change `memory = \"my__m\"` in [groups.g.prefix] to one without \"__\"",
            ),
            (
                "[groups.g]\nservers = [\"fs\", \"memory\"]\n\n[groups.g.prefix]\nmemory = \"fs\"\n",
                11,
                "the same prefix \"fs\"",
            ),
            (
                "[groups.g]\nservers = [\"fs\"]\nprefix = { memory = \"m\" }\n",
                9,
                "`prefix` names server `memory`, which is not in the group",
            ),
            (
                "[groups.g]\nservers = [\"fs\"]\n[groups.g.prefix]\nfs = \"fé\"\n",
                10,
                "must be one or more ASCII letters",
            ),
        ] {
            let (_dir, loaded) = crate::test_support::load_text(&format!("{servers}{group}"));
            let e = format!("{:#}", loaded.expect_err(group));
            assert!(e.contains(&format!("switchyard.toml, line {line}: ")), "{group:?}: {e}");
            assert!(e.contains(says), "{group:?}: {e}");
        }
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
