//! A resource URI as switchyard shows it outside the request (a span's name and
//! `mcp.resource.uri`): redacted as the OpenTelemetry conventions redact `url.full`, since a URI
//! may carry a credential. Its userinfo becomes `REDACTED:REDACTED` (or `REDACTED` without a
//! colon), and the value of every `name=value` parameter of its query and of its fragment
//! `REDACTED` (an OAuth implicit grant puts `#access_token=...` there); names and the path stay.

use std::borrow::Cow;
use std::ops::Range;

const REDACTED: &str = "REDACTED";

/// `uri` redacted; borrowed as it is when there is nothing to hide (no userinfo, no query and
/// no fragment with a `=`).
pub(crate) fn redacted(uri: &str) -> Cow<'_, str> {
    let hash = uri.find('#');
    let end = hash.unwrap_or(uri.len());
    let query = uri[..end].find('?');
    let userinfo = userinfo(&uri[..query.unwrap_or(end)]);
    // A fragment of `name=value` pairs is a query's kind of data (`#access_token=...`); one
    // without a `=` (`#top`) names a place in the resource.
    let fragment = hash.filter(|h| uri[h + 1..].contains('='));
    if query.is_none() && userinfo.is_none() && fragment.is_none() {
        return Cow::Borrowed(uri);
    }
    let mut out = String::with_capacity(uri.len() + 2 * REDACTED.len());
    let mut from = 0;
    if let Some(r) = userinfo {
        out.push_str(&uri[..r.start]);
        out.push_str(if uri[r.clone()].contains(':') { "REDACTED:REDACTED" } else { REDACTED });
        from = r.end;
    }
    if let Some(q) = query {
        out.push_str(&uri[from..=q]);
        values_redacted(&mut out, &uri[q + 1..end]);
        from = end;
    }
    match fragment {
        Some(h) => {
            out.push_str(&uri[from..=h]);
            values_redacted(&mut out, &uri[h + 1..]);
        }
        None => out.push_str(&uri[from..]),
    }
    Cow::Owned(out)
}

/// `params` (`a=1&b&c=2`) onto `out` with each value `REDACTED`, the names kept.
fn values_redacted(out: &mut String, params: &str) {
    for (i, param) in params.split('&').enumerate() {
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
    fn a_uri_s_userinfo_query_and_fragment_values_are_redacted() {
        for (uri, shown) in [
            ("file:///x?token=SECRETQ", "file:///x?token=REDACTED"),
            (
                "https://u:pw@h.example/a?x=1&sig=abc&flag#frag",
                "https://REDACTED:REDACTED@h.example/a?x=REDACTED&sig=REDACTED&flag#frag",
            ),
            ("postgres://tok@db/t", "postgres://REDACTED@db/t"),
            ("s3://b/k?X-Amz-Signature=s&=v&a=", "s3://b/k?X-Amz-Signature=REDACTED&=REDACTED&a=REDACTED"),
            // The fragment's values too: an implicit grant's token is there.
            ("note:///a@b#c?d=e", "note:///a@b#c?d=REDACTED"),
            ("file:///x#access_token=abc", "file:///x#access_token=REDACTED"),
            (
                "https://u@h/cb?state=s#access_token=abc&token_type=bearer&expires_in=3600",
                "https://REDACTED@h/cb?state=REDACTED#access_token=REDACTED&token_type=REDACTED&expires_in=REDACTED",
            ),
            ("file:///x#top", "file:///x#top"),
            ("file:///x?a=1#sec", "file:///x?a=REDACTED#sec"),
            ("file:///x##a=1", "file:///x##a=REDACTED"),
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
