//! A client's budget for the tool list it is given: the limits of its kind (the longest tool
//! name, counted with the prefix the client puts before it, and the most tools it takes), and a
//! plan that keeps a list within them: names over the limit shortened deterministically and
//! reversibly, the rest said, never dropped.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};
use switchyard_config::{BudgetConfig, Expose};

/// The kind of client whose clientInfo gives no known name.
pub const OTHER: &str = "other";

/// The `_meta` key of the initialize a group sends each member session: `{"group": NAME,
/// "prefix": "PREFIX SEPARATOR"}`, what the group's client sees before the member's tool names.
pub const GROUP_META: &str = "dev.switchyard/group";

/// A shortened name ends with `_` and this many hex digits of its original name's hash.
const HASH_DIGITS: usize = 8;

/// A kind of client switchyard knows the limits of.
struct Known {
    kind: &'static str,
    /// What its clientInfo.name contains, lowercased.
    marks: &'static [&'static str],
    name_max: usize,
    name_prefix: &'static str,
    tools_max: usize,
    /// It fetches its tools again on `notifications/tools/list_changed`.
    acts_on_list_changed: bool,
    /// Its tool names may have only ASCII letters, digits, `_` and `-`.
    ascii_names: bool,
}

/// The kinds of client switchyard knows; the first whose mark the name contains.
const KNOWN: &[Known] = &[
    // Claude Code and the Claude API: tool names up to 64 characters, with the client's own
    // `mcp__SERVER__` before them.
    Known {
        kind: "claude",
        marks: &["claude"],
        name_max: 64,
        name_prefix: "mcp__{server}__",
        tools_max: 0,
        acts_on_list_changed: true,
        ascii_names: true,
    },
    // Cursor: 60 characters for the server's name and the tool's together; it warns above 80.
    Known {
        kind: "cursor",
        marks: &["cursor"],
        name_max: 60,
        name_prefix: "mcp_{server}_",
        tools_max: 80,
        acts_on_list_changed: true,
        ascii_names: false,
    },
    // GitHub Copilot defers tools above 30.
    Known {
        kind: "copilot",
        marks: &["copilot"],
        name_max: 0,
        name_prefix: "",
        tools_max: 30,
        acts_on_list_changed: false,
        ascii_names: false,
    },
    // VS Code sends at most 128 tools per request.
    Known {
        kind: "vscode",
        marks: &["visual studio code", "vscode", "vs code"],
        name_max: 0,
        name_prefix: "",
        tools_max: 128,
        acts_on_list_changed: true,
        ascii_names: false,
    },
    // Codex ignores list_changed.
    Known {
        kind: "codex",
        marks: &["codex"],
        name_max: 0,
        name_prefix: "",
        tools_max: 0,
        acts_on_list_changed: false,
        ascii_names: false,
    },
];

/// The limits a client's list is kept within, and how its tools are exposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The kind of client (`claude`, `cursor`, ..., `other`), or the `[budgets.NAME]` that
    /// named this client's clientInfo.name itself.
    pub kind: String,
    /// The longest tool name, counted with `name_prefix`; 0: none.
    pub name_max: usize,
    /// What the client puts before a tool's name (`{server}`: the server's name).
    pub name_prefix: String,
    /// The most tools in one list; 0: none.
    pub tools_max: usize,
    pub expose: Expose,
    /// In search mode, the tools a search finds join the client's list (see
    /// [`BudgetConfig::add_found`]); by default for the clients that act on list_changed.
    pub add_found: bool,
    /// Tool names may have only ASCII letters, digits, `_` and `-` (the Claude API's rule):
    /// a name with another character is renamed as a name too long is.
    pub ascii_names: bool,
}

impl Budget {
    /// The budget of a client named `client` (its clientInfo.name): its kind's built-in
    /// limits, with the keys of `[budgets.KIND]` over them, and those of `[budgets.NAME]` (the
    /// client's own name, lowercased) over both.
    pub fn for_client(client: Option<&str>, table: &BTreeMap<String, BudgetConfig>) -> Budget {
        let name = client.unwrap_or_default().to_lowercase();
        let known = KNOWN.iter().find(|k| k.marks.iter().any(|m| name.contains(m)));
        let mut b = match known {
            Some(k) => Budget {
                kind: k.kind.to_string(),
                name_max: k.name_max,
                name_prefix: k.name_prefix.to_string(),
                tools_max: k.tools_max,
                expose: Expose::List,
                add_found: k.acts_on_list_changed,
                ascii_names: k.ascii_names,
            },
            None => Budget {
                kind: OTHER.into(),
                name_max: 0,
                name_prefix: String::new(),
                tools_max: 0,
                expose: Expose::List,
                add_found: false,
                ascii_names: false,
            },
        };
        if let Some(c) = table.get(&b.kind) {
            b.apply(c);
        }
        if !name.is_empty()
            && name != b.kind
            && let Some(c) = table.get(&name)
        {
            b.apply(c);
            b.kind = name;
        }
        b
    }

    fn apply(&mut self, c: &BudgetConfig) {
        self.name_max = c.name_max.unwrap_or(self.name_max);
        self.name_prefix = c.name_prefix.clone().unwrap_or_else(|| self.name_prefix.clone());
        self.tools_max = c.tools_max.unwrap_or(self.tools_max);
        self.expose = c.expose.unwrap_or(self.expose);
        self.add_found = c.add_found.unwrap_or(self.add_found);
    }

    /// The budget of a group member's tools: the client knows the group (`group`) as the
    /// server, and sees `member_prefix` before each of this member's tool names.
    /// Its count is the group's to keep: the client takes the group's merged list, not one
    /// member's (the group says a merged list over `tools_max`).
    pub fn in_group(mut self, group: &str, member_prefix: &str) -> Budget {
        self.name_prefix = format!("{}{member_prefix}", self.name_prefix.replace("{server}", group));
        self.tools_max = 0;
        self
    }

    /// How many characters a tool's own name may have, with the prefix of `server` before it.
    pub fn room(&self, server: &str) -> Option<usize> {
        (self.name_max > 0)
            .then(|| self.name_max.saturating_sub(self.name_prefix.replace("{server}", server).chars().count()))
    }
}

/// A list kept within a budget: the names shortened, both ways, and what could not be kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Shown name -> the name the list gave.
    originals: BTreeMap<String, String>,
    /// The name the list gave -> shown name (only those shortened).
    shown: BTreeMap<String, String>,
    /// Names over the limit with no room even for a hash (the prefix alone is too long): kept.
    pub unfit: Vec<String>,
    /// The tools in the list, and the budget's most (0: none).
    pub count: usize,
    pub tools_max: usize,
    /// The characters a name may have here (None: no limit).
    pub room: Option<usize>,
}

impl Plan {
    /// The plan that keeps the tool names `names` (of server `server`, as the client is shown
    /// them otherwise) within `budget`. A name that fits stays; a longer one becomes its first
    /// characters, `_` and 8 hex digits of its SHA-256, as long as the room. The plan depends on
    /// the set of names only (not their order), so any list of the same names gives it again.
    pub fn new(budget: &Budget, server: &str, names: &[&str]) -> Plan {
        let mut plan =
            Plan { count: names.len(), tools_max: budget.tools_max, room: budget.room(server), ..Plan::default() };
        let ascii = budget.ascii_names;
        if plan.room.is_none() && !ascii {
            return plan;
        }
        let fits = |n: &str| {
            plan.room.is_none_or(|room| n.chars().count() <= room) && (!ascii || n.chars().all(tool_name_char))
        };
        let all: BTreeSet<&str> = names.iter().copied().collect();
        let mut taken: BTreeSet<String> = all.iter().filter(|n| fits(n)).map(|n| n.to_string()).collect();
        for name in all.iter().filter(|n| !fits(n)) {
            // A name renamed for its characters only keeps its length (and gains the hash).
            let room = plan.room.unwrap_or(usize::MAX).min(name.chars().count() + 1 + HASH_DIGITS);
            if room < HASH_DIGITS {
                plan.unfit.push(name.to_string());
                continue;
            }
            // A clash (with a name that fits, or another shortened one) takes the next salt.
            let short = (0u32..)
                .map(|salt| shorten(name, room, salt, ascii))
                .find(|s| !taken.contains(s) && !all.contains(s.as_str()))
                .expect("some salt gives a name not taken");
            taken.insert(short.clone());
            plan.originals.insert(short.clone(), name.to_string());
            plan.shown.insert(name.to_string(), short);
        }
        plan
    }

    /// The name the client is shown for `name`.
    pub fn shown<'a>(&'a self, name: &'a str) -> &'a str {
        self.shown.get(name).map_or(name, String::as_str)
    }

    /// The name the client is shown for `name`, when it is shortened.
    pub fn shortened(&self, name: &str) -> Option<&str> {
        self.shown.get(name).map(String::as_str)
    }

    /// The list's name of the tool the client calls `shown`, when it was shortened.
    pub fn original(&self, shown: &str) -> Option<&str> {
        self.originals.get(shown).map(String::as_str)
    }

    /// (shown, original) of every name shortened.
    pub fn renamed(&self) -> impl Iterator<Item = (&str, &str)> {
        self.originals.iter().map(|(s, o)| (s.as_str(), o.as_str()))
    }

    pub fn over_count(&self) -> bool {
        self.tools_max > 0 && self.count > self.tools_max
    }

    /// Whether the plan changes nothing and has nothing to say.
    pub fn is_quiet(&self) -> bool {
        self.originals.is_empty() && self.unfit.is_empty() && !self.over_count()
    }
}

/// Whether a client that takes only ASCII tool names takes `c` in one.
fn tool_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// `name` in `room` characters: its first characters, `_` and 8 hex digits of the SHA-256 of
/// the name (and of `salt`, when not 0); only the hash when the room is that small. `ascii`:
/// each character a client of ASCII names refuses is `_` (the hash keeps names apart).
pub fn shorten(name: &str, room: usize, salt: u32, ascii: bool) -> String {
    let mut hash = Sha256::new();
    hash.update(name.as_bytes());
    if salt > 0 {
        hash.update(format!("#{salt}").as_bytes());
    }
    let digest = hash.finalize();
    let hex: String = digest.iter().take(HASH_DIGITS / 2).map(|b| format!("{b:02x}")).collect();
    let keep = room.saturating_sub(HASH_DIGITS + 1);
    if keep == 0 {
        return hex;
    }
    let head: String = name.chars().take(keep).map(|c| if ascii && !tool_name_char(c) { '_' } else { c }).collect();
    format!("{head}_{hex}")
}

/// The initialize params a group sends member session `member_prefix` of group `group`: the
/// client's own, with [`GROUP_META`] saying how the group shows the member's tools.
pub fn member_initialize(params: &serde_json::Value, group: &str, member_prefix: &str) -> serde_json::Value {
    let mut params = params.clone();
    if let Some(p) = params.as_object_mut() {
        let meta = p.entry("_meta").or_insert_with(|| serde_json::json!({}));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(GROUP_META.into(), serde_json::json!({ "group": group, "prefix": member_prefix }));
        }
    }
    params
}

/// A digest of a tool list as one client is shown it, whatever the order of its tools and of
/// their keys: two lists with the same digest show the client the same.
pub fn list_digest(items: &[serde_json::Value]) -> [u8; 32] {
    let mut texts: Vec<String> = items.iter().map(serde_json::Value::to_string).collect();
    texts.sort_unstable();
    let mut hash = Sha256::new();
    for t in texts {
        hash.update(t.as_bytes());
        hash.update(b"\n");
    }
    hash.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(client: &str) -> Budget {
        Budget::for_client(Some(client), &BTreeMap::new())
    }

    fn long_names() -> Vec<String> {
        let mut names: Vec<String> = (0..40)
            .map(|i| format!("create_or_update_repository_branch_protection_rule_for_organisation_{i:02}"))
            .collect();
        names.push("read_file".into());
        names.push("x".repeat(64));
        names
    }

    #[test]
    fn known_clients_get_their_limits() {
        let claude = budget("claude-code");
        assert_eq!((claude.kind.as_str(), claude.name_max, claude.room("github")), ("claude", 64, Some(51)));
        let cursor = budget("Cursor");
        assert_eq!((cursor.kind.as_str(), cursor.name_max, cursor.tools_max), ("cursor", 60, 80));
        assert_eq!(budget("Visual Studio Code").tools_max, 128);
        assert_eq!(budget("github-copilot-cli").tools_max, 30);
        let other = budget("some-agent");
        assert_eq!((other.kind.as_str(), other.room("x")), (OTHER, None));
        assert_eq!(Budget::for_client(None, &BTreeMap::new()).kind, OTHER);
        // Found tools join the list of clients that act on list_changed; Codex ignores it.
        assert!(budget("claude-code").add_found && budget("Visual Studio Code").add_found);
        assert!(!budget("codex-mcp-client").add_found && !budget("some-agent").add_found);
    }

    #[test]
    fn a_group_members_names_count_the_group_and_its_prefix() {
        let b = budget("claude-code").in_group("work", "filesystem__");
        assert_eq!(b.name_prefix, "mcp__work__filesystem__");
        assert_eq!(b.room("ignored"), Some(64 - "mcp__work__filesystem__".len()));
    }

    #[test]
    fn the_config_overrides_a_kind_and_a_client_by_name() {
        let mut table = BTreeMap::new();
        table.insert("claude".into(), BudgetConfig { name_max: Some(40), ..Default::default() });
        table.insert(
            "my-agent".into(),
            BudgetConfig { name_max: Some(30), expose: Some(Expose::Search), ..Default::default() },
        );
        let claude = Budget::for_client(Some("claude-code"), &table);
        assert_eq!((claude.name_max, claude.name_prefix.as_str()), (40, "mcp__{server}__"));
        table.insert("codex".into(), BudgetConfig { add_found: Some(true), ..Default::default() });
        assert!(Budget::for_client(Some("codex-mcp-client"), &table).add_found);
        let mine = Budget::for_client(Some("My-Agent"), &table);
        assert_eq!((mine.kind.as_str(), mine.name_max, mine.expose), ("my-agent", 30, Expose::Search));
    }

    #[test]
    fn shortened_names_fit_with_the_clients_prefix_and_come_back() {
        let names = long_names();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        for (client, server, max) in [("claude-code", "github", 64), ("cursor", "github-enterprise", 60)] {
            let b = budget(client);
            let plan = Plan::new(&b, server, &refs);
            let prefix = b.name_prefix.replace("{server}", server);
            let mut seen = BTreeSet::new();
            for n in &names {
                let shown = plan.shown(n);
                assert!(prefix.len() + shown.chars().count() <= max, "{client}: {prefix}{shown} is over {max}");
                assert!(seen.insert(shown.to_string()), "{client}: {shown} shown twice");
                assert_eq!(plan.original(shown).unwrap_or(shown), n, "{client}: {shown} does not come back");
            }
            assert_eq!(plan.shown("read_file"), "read_file", "a name that fits stays");
            assert_eq!(plan.renamed().count(), 41, "the 40 long names and the 64 x's");
        }
    }

    #[test]
    fn a_plan_depends_on_the_names_only() {
        let names = long_names();
        let mut refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let b = budget("claude-code");
        let first = Plan::new(&b, "github", &refs);
        refs.reverse();
        assert_eq!(Plan::new(&b, "github", &refs), first);
        // And across runs: the hash is SHA-256, not a per-process hasher.
        assert_eq!(shorten("abcdefghijklmnopqrstuvwxyz", 20, 0, false), "abcdefghijk_71c480df");
    }

    #[test]
    fn a_shortened_name_never_takes_a_listed_one() {
        let long = "a_tool_with_a_name_much_longer_than_the_room";
        let clash = shorten(long, 20, 0, false);
        let b = Budget { name_max: 20, ..budget("x") };
        let plan = Plan::new(&b, "s", &[long, &clash]);
        assert_eq!(plan.shown(&clash), clash);
        assert_ne!(plan.shown(long), clash);
        assert_eq!(plan.original(plan.shown(long)), Some(long));
    }

    #[test]
    fn no_room_is_said_and_a_long_list_is_counted() {
        // 4 characters left after the prefix: no room for a hash.
        let b = Budget { name_max: 24, name_prefix: "mcp__{server}__".into(), tools_max: 2, ..budget("x") };
        let plan = Plan::new(&b, "a-server-name", &["short", "a_longer_tool_name", "c"]);
        assert_eq!(plan.unfit, vec!["a_longer_tool_name".to_string(), "short".to_string()]);
        assert_eq!(plan.shown("short"), "short", "kept as it is, and said");
        assert!(plan.over_count());
        assert!(!plan.is_quiet());
        assert!(Plan::new(&budget("x"), "s", &["a"]).is_quiet());
    }

    #[test]
    fn digests_ignore_order_not_content() {
        let a = serde_json::json!({"name": "a", "description": "x"});
        let b = serde_json::json!({"name": "b"});
        let changed = serde_json::json!({"name": "a", "description": "y"});
        assert_eq!(list_digest(&[a.clone(), b.clone()]), list_digest(&[b.clone(), a.clone()]));
        assert_ne!(list_digest(&[a, b.clone()]), list_digest(&[changed, b]));
    }
}

#[cfg(test)]
mod ascii_tests {
    use super::*;

    /// Found from outside: `héllo_wörld_日本` reached Claude clients as it is, but the Claude API
    /// takes only `[a-zA-Z0-9_-]` in tool names. It is renamed to ASCII, deterministically and
    /// both ways, as a long name is shortened; other clients keep it.
    #[test]
    fn a_name_with_characters_claude_refuses_is_renamed_to_ascii_both_ways() {
        let claude = Budget::for_client(Some("claude-code"), &BTreeMap::new());
        let names = ["héllo_wörld_日本", "plain_name", "hello_w_rld____x"];
        let plan = Plan::new(&claude, "fx", &names);
        let shown = plan.shown("héllo_wörld_日本").to_string();
        assert!(shown.starts_with("h_llo_w_rld___") && shown.chars().all(tool_name_char), "{shown}");
        assert_eq!(plan.original(&shown), Some("héllo_wörld_日本"));
        assert_eq!(plan.shown("plain_name"), "plain_name");
        assert_eq!(Plan::new(&claude, "fx", &names).shown("héllo_wörld_日本"), shown, "the same every time");
        assert_eq!(plan.renamed().count(), 1);
        // Long and not ASCII: shortened and made ASCII within the room.
        let long = "ü".repeat(80);
        let plan = Plan::new(&claude, "fx", &[long.as_str()]);
        let shown = plan.shown(&long);
        assert!(shown.chars().all(tool_name_char) && shown.len() <= 64 - "mcp__fx__".len(), "{shown}");
        let cursor = Budget::for_client(Some("cursor"), &BTreeMap::new());
        assert!(Plan::new(&cursor, "fx", &names).is_quiet());
    }
}
