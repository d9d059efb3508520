//! The `WWW-Authenticate: Bearer ...` challenge of a 401 or 403 (RFC 6750 section 3, RFC 9728
//! section 5.1): where the resource metadata is, which scope is wanted, and why.

/// What a Bearer challenge says. Fields a server left out are None.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Challenge {
    /// RFC 9728: the URL of the server's Protected Resource Metadata.
    pub resource_metadata: Option<String>,
    /// The scope the request needs (space-separated).
    pub scope: Option<String>,
    /// `invalid_token`, `insufficient_scope`, ...
    pub error: Option<String>,
}

impl Challenge {
    /// The Bearer challenge among `values` (the header may hold several schemes, and come more
    /// than once). None: no Bearer challenge.
    pub fn parse<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<Challenge> {
        values.into_iter().find_map(parse_one)
    }

    /// Whether the server says the token lacks a scope (a 403 step-up).
    pub fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

fn parse_one(value: &str) -> Option<Challenge> {
    let mut rest = value.trim_start();
    // Schemes other than Bearer before it: skip to a `Bearer` word at a scheme position.
    loop {
        let lower = rest.get(..6).map(str::to_ascii_lowercase);
        if lower.as_deref() == Some("bearer") && rest[6..].chars().next().is_none_or(|c| c == ' ' || c == ',') {
            rest = &rest[6..];
            break;
        }
        let next = rest.find(", ").or_else(|| rest.find(' '))?;
        rest = rest[next + 1..].trim_start();
    }
    let mut out = Challenge::default();
    for (key, value) in params(rest) {
        match key.to_ascii_lowercase().as_str() {
            "resource_metadata" => out.resource_metadata = Some(value),
            "scope" => out.scope = Some(value),
            "error" => out.error = Some(value),
            _ => {}
        }
    }
    Some(out)
}

/// `key=value` or `key="quoted \"value\""` pairs separated by commas, up to the next scheme.
fn params(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c == ',' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() {
            return out;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek() != Some(&'=') {
            // A new scheme name: its parameters are not ours.
            return out;
        }
        chars.next();
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n)
                        }
                    }
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' || c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        out.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_quoted_and_bare_parameters() {
        let c = Challenge::parse([
            r#"Bearer error="insufficient_scope", scope="mcp:read mcp:write", resource_metadata="http://h/.well-known/oauth-protected-resource/mcp""#,
        ])
        .unwrap();
        assert!(c.insufficient_scope());
        assert_eq!(c.scope.as_deref(), Some("mcp:read mcp:write"));
        assert_eq!(c.resource_metadata.as_deref(), Some("http://h/.well-known/oauth-protected-resource/mcp"));
        let bare = Challenge::parse(["Bearer realm=x,scope=files"]).unwrap();
        assert_eq!(bare.scope.as_deref(), Some("files"));
    }

    #[test]
    fn finds_bearer_after_another_scheme_and_not_without_one() {
        let c = Challenge::parse([r#"Basic realm="a", Bearer scope="s""#]).unwrap();
        assert_eq!(c.scope.as_deref(), Some("s"));
        assert_eq!(Challenge::parse([r#"Basic realm="a""#]), None);
        assert_eq!(Challenge::parse(["Bearer"]), Some(Challenge::default()));
    }
}
