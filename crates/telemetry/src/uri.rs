//! A resource URI as a span shows it (its name and `mcp.resource.uri`): redacted as the
//! OpenTelemetry conventions redact `url.full`, since a URI may carry a credential. Its userinfo
//! becomes `REDACTED:REDACTED` (or `REDACTED` without a colon), and the value of every query
//! parameter `REDACTED`; names, the path and the fragment stay.

use std::borrow::Cow;
use std::ops::Range;

const REDACTED: &str = "REDACTED";

/// `uri` redacted; borrowed as it is when it has no query and no userinfo.
pub(crate) fn redacted(uri: &str) -> Cow<'_, str> {
    let end = uri.find('#').unwrap_or(uri.len());
    let query = uri[..end].find('?');
    let userinfo = userinfo(&uri[..query.unwrap_or(end)]);
    if query.is_none() && userinfo.is_none() {
        return Cow::Borrowed(uri);
    }
    let mut out = String::with_capacity(uri.len() + 2 * REDACTED.len());
    let mut from = 0;
    if let Some(r) = userinfo {
        out.push_str(&uri[..r.start]);
        out.push_str(if uri[r.clone()].contains(':') { "REDACTED:REDACTED" } else { REDACTED });
        from = r.end;
    }
    let Some(q) = query else {
        out.push_str(&uri[from..]);
        return Cow::Owned(out);
    };
    out.push_str(&uri[from..=q]);
    for (i, param) in uri[q + 1..end].split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match param.split_once('=') {
            Some((name, _)) => {
                out.push_str(name);
                out.push('=');
                out.push_str(REDACTED);
            }
            // A name alone (`?download`) has no value to hide.
            None => out.push_str(param),
        }
    }
    out.push_str(&uri[end..]);
    Cow::Owned(out)
}

/// Where the userinfo of `uri` (cut before its query) is: the authority's part before its `@`.
fn userinfo(uri: &str) -> Option<Range<usize>> {
    let colon = uri.find(':')?;
    let scheme = &uri[..colon];
    let is_scheme = !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !is_scheme || !uri[colon + 1..].starts_with("//") {
        return None;
    }
    let start = colon + 3;
    let authority = uri[start..].find('/').map_or(&uri[start..], |i| &uri[start..start + i]);
    authority.rfind('@').map(|at| start..start + at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_s_userinfo_and_query_values_are_redacted() {
        for (uri, shown) in [
            ("file:///x?token=SECRETQ", "file:///x?token=REDACTED"),
            (
                "https://u:pw@h.example/a?x=1&sig=abc&flag#frag",
                "https://REDACTED:REDACTED@h.example/a?x=REDACTED&sig=REDACTED&flag#frag",
            ),
            ("postgres://tok@db/t", "postgres://REDACTED@db/t"),
            ("s3://b/k?X-Amz-Signature=s&=v&a=", "s3://b/k?X-Amz-Signature=REDACTED&=REDACTED&a=REDACTED"),
            ("note:///a@b#c?d=e", "note:///a@b#c?d=e"),
        ] {
            assert_eq!(redacted(uri), shown, "{uri}");
        }
    }

    #[test]
    fn a_uri_with_nothing_to_hide_is_borrowed_as_it_is() {
        for uri in ["file:///home/me/notes.md", "fixture://name", "mailto:me@example.com", "note:///a@b#x", "", "x"] {
            assert!(matches!(redacted(uri), Cow::Borrowed(u) if u == uri), "{uri}");
        }
    }
}
