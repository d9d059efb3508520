//! A remote server's URL: checked, shown without secrets, and named.

/// A remote server's URL, checked: http or https, with a host, and no user name or password
/// (URLs are logged). The error completes "... url ..." and does not repeat the URL.
pub fn parse_url(s: &str) -> Result<url::Url, String> {
    let u = url::Url::parse(s)
        .map_err(|e| format!("is not a valid URL ({e}); write it as https://host/path or http://host:port/path"))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err(format!("must start with https:// or http://, not {}:", u.scheme()));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("has no host; write it as https://host/path".into());
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err("has a user name or password in it, and URLs appear in logs: send credentials in a header instead (e.g. `Authorization: Bearer ${MCP_TOKEN}`)".into());
    }
    Ok(u)
}

/// A URL as shown in messages and listings: scheme, host, port and path only (the query,
/// fragment and credentials may hold a key).
pub fn display_url(url: &url::Url) -> String {
    let mut shown = url.clone();
    shown.set_query(None);
    shown.set_fragment(None);
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}

/// A remote server's name from its URL: the host, and the port when it is not the scheme's
/// default (`mcp.example.com`, `127.0.0.1:3001`).
pub fn url_name(u: &url::Url) -> String {
    let host = u.host_str().unwrap_or_default();
    match u.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// Whether the URL's host is this machine (`localhost`, 127.0.0.0/8, ::1): plain http there
/// does not cross a network.
pub fn is_loopback(u: &url::Url) -> bool {
    match u.host() {
        Some(url::Host::Domain(d)) => {
            d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost")
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::load_text;

    #[test]
    fn bad_urls_are_refused_without_repeating_them() {
        for (url, says) in [
            ("mcp.example.com/mcp", "not a valid URL"),
            ("ftp://mcp.example.com/mcp", "not ftp:"),
            ("http://", "not a valid URL"),
            ("file:///tmp/x", "not file:"),
            ("https://me:hunter2@mcp.example.com/mcp", "user name or password"),
        ] {
            let e = parse_url(url).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("hunter2") && !e.contains("example.com"), "{url}: {e}");
        }
        let (_d, c) = load_text("[server]\n\nurl = \"ftp://x/\"\n");
        assert!(format!("{:#}", c.unwrap_err()).contains("line 3: [server] url must start with https://"));
        assert_eq!(parse_url("https://mcp.example.com/mcp").unwrap().as_str(), "https://mcp.example.com/mcp");
    }

    #[test]
    fn names_come_from_the_host_and_a_port_that_is_not_the_default() {
        let name = |u: &str| url_name(&parse_url(u).unwrap());
        assert_eq!(name("https://mcp.example.com/mcp"), "mcp.example.com");
        assert_eq!(name("https://mcp.example.com:443/mcp"), "mcp.example.com");
        assert_eq!(name("http://127.0.0.1:3001/sse"), "127.0.0.1:3001");
        assert_eq!(name("http://[::1]:8080/mcp"), "[::1]:8080");
        assert_eq!(name("http://Localhost/mcp"), "localhost");
    }

    #[test]
    fn loopback_hosts_are_told_apart() {
        let lo = |u: &str| is_loopback(&parse_url(u).unwrap());
        assert!(
            lo("http://localhost:3000/mcp")
                && lo("http://127.0.0.5/")
                && lo("http://[::1]/")
                && lo("http://a.localhost/")
        );
        assert!(!lo("http://mcp.example.com/") && !lo("http://10.0.0.1/") && !lo("http://localhost.example.com/"));
    }
}
