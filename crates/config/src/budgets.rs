//! `[budgets.KIND]`: a kind of client's limits on the tool list it is given (over the limits
//! built in for the clients switchyard knows), and how a server's tools are exposed.

use serde::{Deserialize, Serialize};

/// How a client is given a server's tools: its list as it is, or two tools that search it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Expose {
    /// The tools as the server lists them (shaped by the plugins and the client's budget).
    #[default]
    List,
    /// `search_tools` and `call_tool` only: the client finds a tool, then calls it by name.
    Search,
}

/// One `[budgets.KIND]` table; each key given replaces the built-in value for that kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BudgetConfig {
    /// The longest tool name the client takes, counted with `name_prefix`; 0: no limit.
    pub name_max: Option<usize>,
    /// What the client puts before a tool's name where the limit counts it; `{server}` stands
    /// for the name the client knows the server by (e.g. `mcp__{server}__`).
    pub name_prefix: Option<String>,
    /// The most tools the client takes in one list before it warns, defers or fails; 0: no limit.
    pub tools_max: Option<usize>,
    /// How the client is given the tools: `list` or `search`.
    pub expose: Option<Expose>,
    /// In search mode, the tools a search finds join the client's list for the rest of its
    /// session, and it is told its list changed: for clients that act on `list_changed`.
    pub add_found: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_table_reads_and_refuses_unknown_keys() {
        let b: BudgetConfig = toml::from_str("name_max = 40\nexpose = \"search\"").expect("parses");
        assert_eq!(b.name_max, Some(40));
        assert_eq!(b.expose, Some(Expose::Search));
        assert!(toml::from_str::<BudgetConfig>("name_length = 40").is_err());
        assert!(toml::from_str::<BudgetConfig>("expose = \"all\"").is_err());
    }
}
