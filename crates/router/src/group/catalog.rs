//! What a group shows its client and how it reads it back: the merged `tools/list`,
//! `prompts/list`, `resources/list` and `resources/templates/list` answers ([`Catalog::merge`])
//! and the member a tool or prompt name, or a resource URI, goes to ([`Catalog::route_name`],
//! [`Catalog::route_uri`]). Every name the client sees is made by [`Catalog::expose`] and read
//! back by `route_name`; shaping a list for a client (shorter names, fewer tools) belongs here.

use std::collections::HashMap;

use serde_json::Value;

/// The kinds of list a group merges, with the key of their items and what names an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum List {
    Tools,
    Prompts,
    Resources,
    Templates,
}

impl List {
    /// The list a request method asks for.
    pub(crate) fn of_method(method: &str) -> Option<List> {
        Some(match method {
            "tools/list" => List::Tools,
            "prompts/list" => List::Prompts,
            "resources/list" => List::Resources,
            "resources/templates/list" => List::Templates,
            _ => return None,
        })
    }

    pub(crate) fn method(self) -> &'static str {
        match self {
            List::Tools => "tools/list",
            List::Prompts => "prompts/list",
            List::Resources => "resources/list",
            List::Templates => "resources/templates/list",
        }
    }

    /// The key of the items in its result.
    pub(crate) fn key(self) -> &'static str {
        match self {
            List::Tools => "tools",
            List::Prompts => "prompts",
            List::Resources => "resources",
            List::Templates => "resourceTemplates",
        }
    }

    /// The server capability a member must declare to be asked for it.
    pub(crate) fn capability(self) -> &'static str {
        match self {
            List::Tools => "tools",
            List::Prompts => "prompts",
            List::Resources | List::Templates => "resources",
        }
    }
}

/// Where a name or URI goes: the member's index, and the name or URI its server knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Routed {
    pub member: usize,
    pub original: String,
}

/// Why a name or URI goes nowhere, said to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unrouted {
    /// No member has it.
    Unknown(String),
}

/// The names and URIs a group's client was shown, by member.
pub(crate) struct Catalog {
    /// Each member's prefix, by index.
    prefixes: Vec<String>,
    separator: String,
    group: String,
    /// Shown tool and prompt names -> where they go (from the last lists merged).
    names: HashMap<(List, String), Routed>,
    /// Resource URIs of the last `resources/list` -> member.
    uris: HashMap<String, usize>,
    /// URI templates of the last `resources/templates/list`, by member.
    templates: Vec<(usize, String)>,
    /// Members that declared resources (an unlisted URI of the only one goes to it).
    with_resources: Vec<usize>,
}

impl Catalog {
    pub(crate) fn new(group: &str, prefixes: Vec<String>, separator: &str) -> Catalog {
        Catalog {
            prefixes,
            separator: separator.to_string(),
            group: group.to_string(),
            names: HashMap::new(),
            uris: HashMap::new(),
            templates: Vec::new(),
            with_resources: Vec::new(),
        }
    }

    /// The name the client sees for `name` of member `member`.
    pub(crate) fn expose(&self, member: usize, name: &str) -> String {
        format!("{}{}{name}", self.prefixes[member], self.separator)
    }

    /// What joins a prefix and a name.
    pub(crate) fn separator(&self) -> &str {
        &self.separator
    }

    /// Notes that `member` declared resources.
    pub(crate) fn has_resources(&mut self, member: usize) {
        if !self.with_resources.contains(&member) {
            self.with_resources.push(member);
        }
    }

    /// Merges each member's items of `list` (in member order) into one result: names prefixed,
    /// URIs kept and remembered for routing. `pages[i]`: member `i`'s items, None when it was
    /// not asked (down, or without the capability).
    pub(crate) fn merge(&mut self, list: List, pages: Vec<(usize, Vec<Value>)>) -> Value {
        match list {
            List::Tools | List::Prompts => self.names.retain(|(l, _), _| *l != list),
            List::Resources => self.uris.clear(),
            List::Templates => self.templates.clear(),
        }
        let mut items = Vec::new();
        for (member, page) in pages {
            for mut item in page {
                match list {
                    List::Tools | List::Prompts => {
                        let Some(name) = item.get("name").and_then(Value::as_str).map(str::to_string) else { continue };
                        let shown = self.expose(member, &name);
                        item["name"] = Value::String(shown.clone());
                        self.names.insert((list, shown), Routed { member, original: name });
                    }
                    List::Resources => {
                        if let Some(uri) = item.get("uri").and_then(Value::as_str) {
                            // The first member to list a URI keeps it (their order is the config's).
                            self.uris.entry(uri.to_string()).or_insert(member);
                        }
                    }
                    List::Templates => {
                        if let Some(t) = item.get("uriTemplate").and_then(Value::as_str) {
                            self.templates.push((member, t.to_string()));
                        }
                    }
                }
                items.push(item);
            }
        }
        serde_json::json!({ list.key(): items })
    }

    /// The member a tool or prompt `name` the client sent goes to, and its name there: one of
    /// the last list's names, else read as `PREFIX SEPARATOR NAME` (a client may call a tool
    /// it knows from before, without listing again).
    pub(crate) fn route_name(&self, list: List, name: &str) -> Result<Routed, Unrouted> {
        if let Some(r) = self.names.get(&(list, name.to_string())) {
            return Ok(r.clone());
        }
        if let Some((prefix, rest)) = name.split_once(self.separator.as_str())
            && let Some(member) = self.prefixes.iter().position(|p| p == prefix)
            && !rest.is_empty()
        {
            return Ok(Routed { member, original: rest.to_string() });
        }
        let what = if list == List::Prompts { "prompt" } else { "tool" };
        Err(Unrouted::Unknown(format!(
            "no server of group `{}` has the {what} `{}`: its {what}s are named SERVER{}NAME, with SERVER one of {}",
            self.group,
            name.chars().take(128).collect::<String>(),
            self.separator,
            self.prefixes.join(", ")
        )))
    }

    /// The member a resource `uri` goes to: the one that listed it, else the one whose URI
    /// template it matches (the longest literal start wins), else the only member with
    /// resources.
    pub(crate) fn route_uri(&self, uri: &str) -> Result<Routed, Unrouted> {
        let found = self.uris.get(uri).copied().or_else(|| {
            self.templates
                .iter()
                .filter(|(_, t)| template_matches(t, uri))
                .max_by_key(|(_, t)| t.find('{').unwrap_or(t.len()))
                .map(|(m, _)| *m)
        });
        let found = found.or(match self.with_resources.as_slice() {
            [only] => Some(*only),
            _ => None,
        });
        match found {
            Some(member) => Ok(Routed { member, original: uri.to_string() }),
            None => Err(Unrouted::Unknown(format!(
                "no server of group `{}` lists the resource `{}` or a template it matches; list resources/list or resources/templates/list first",
                self.group,
                uri.chars().take(256).collect::<String>()
            ))),
        }
    }
}

/// Whether `uri` could come from the URI template `template` (RFC 6570): its literal parts
/// appear in order, the first at the start and the last at the end.
pub(crate) fn template_matches(template: &str, uri: &str) -> bool {
    let mut literals = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        literals.push(&rest[..open]);
        match rest[open..].find('}') {
            Some(close) => rest = &rest[open + close + 1..],
            None => return false,
        }
    }
    let tail = rest;
    if literals.is_empty() {
        return template == uri;
    }
    let Some(mut at) = uri.strip_prefix(literals[0]).map(|_| literals[0].len()) else { return false };
    for lit in &literals[1..] {
        match uri[at..].find(lit) {
            Some(i) => at += i + lit.len(),
            None => return false,
        }
    }
    uri.len() >= at + tail.len() && uri.ends_with(tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn catalog() -> Catalog {
        Catalog::new("work", vec!["fs".into(), "mem".into()], "__")
    }

    #[test]
    fn merged_names_are_prefixed_and_route_back_to_their_member() {
        let mut c = catalog();
        let merged = c.merge(
            List::Tools,
            vec![(0, vec![json!({"name": "read", "inputSchema": {}})]), (1, vec![json!({"name": "read"})])],
        );
        assert_eq!(merged["tools"][0]["name"], "fs__read");
        assert_eq!(merged["tools"][1]["name"], "mem__read");
        assert_eq!(c.route_name(List::Tools, "mem__read"), Ok(Routed { member: 1, original: "read".into() }));
        // Not listed yet: read by its prefix.
        assert_eq!(c.route_name(List::Tools, "fs__a__b"), Ok(Routed { member: 0, original: "a__b".into() }));
        let Err(Unrouted::Unknown(e)) = c.route_name(List::Tools, "git__log") else { panic!() };
        assert!(e.contains("`git__log`") && e.contains("fs, mem"), "{e}");
    }

    #[test]
    fn uris_go_to_the_member_that_listed_them_or_whose_template_they_match() {
        let mut c = catalog();
        c.has_resources(0);
        c.has_resources(1);
        c.merge(List::Resources, vec![(0, vec![json!({"uri": "file:///a"})]), (1, vec![json!({"uri": "mem://x"})])]);
        c.merge(List::Templates, vec![(1, vec![json!({"uriTemplate": "mem://notes/{id}"})])]);
        assert_eq!(c.route_uri("mem://x").unwrap().member, 1);
        assert_eq!(c.route_uri("file:///a").unwrap().member, 0);
        assert_eq!(c.route_uri("mem://notes/7").unwrap().member, 1);
        assert!(matches!(c.route_uri("other://y"), Err(Unrouted::Unknown(e)) if e.contains("`other://y`")));
        let mut one = catalog();
        one.has_resources(1);
        assert_eq!(one.route_uri("anything://").unwrap().member, 1);
    }

    #[test]
    fn templates_match_their_literal_parts_in_order() {
        assert!(template_matches("file:///{path}", "file:///a/b"));
        assert!(template_matches("test://static/resource/{id}", "test://static/resource/3"));
        assert!(template_matches("a://{x}/b/{y}.txt", "a://1/b/2.txt"));
        assert!(!template_matches("a://{x}/b/{y}.txt", "a://1/c/2.txt"));
        assert!(!template_matches("file:///{path}", "mem://x"));
        assert!(template_matches("exact://x", "exact://x"));
    }
}
