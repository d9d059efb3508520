//! The browser step: the authorization URL handed to a browser command, and the loopback
//! listener the authorization server redirects back to (127.0.0.1 only; `state` checked).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::{Error, Step};

/// The path the redirect comes back to.
const CALLBACK: &str = "/callback";
/// The longest request head read from a browser.
const MAX_HEAD: usize = 16 * 1024;
/// How long a connection may take to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);

/// What a successful redirect carried.
#[derive(Debug)]
pub struct Callback {
    pub code: crate::Secret,
    /// RFC 9207: the issuer, when the server sent one.
    pub iss: Option<String>,
}

/// A loopback listener for one authorization's redirect.
pub struct Listener {
    listener: TcpListener,
    pub redirect_uri: String,
}

impl Listener {
    /// Listens on 127.0.0.1: on the port of `preferred` (a redirect URI registered earlier) when
    /// it is free, else on a port the system picks.
    pub async fn bind(preferred: Option<&str>) -> Result<Listener, Error> {
        let port = preferred
            .and_then(|u| url::Url::parse(u).ok())
            .filter(|u| u.host_str() == Some("127.0.0.1") && u.path() == CALLBACK)
            .and_then(|u| u.port());
        let listener = match port {
            Some(p) => match TcpListener::bind(("127.0.0.1", p)).await {
                Ok(l) => l,
                Err(_) => bind_any().await?,
            },
            None => bind_any().await?,
        };
        let port = listener.local_addr().map_err(|e| Error::new(Step::Authorization, e.to_string()))?.port();
        Ok(Listener { listener, redirect_uri: format!("http://127.0.0.1:{port}{CALLBACK}") })
    }

    /// A listener on exactly `port` of 127.0.0.1 (`redirect_port`): the redirect URI registered
    /// for the client names it, so no other port will do.
    pub async fn bind_exact(port: u16) -> Result<Listener, Error> {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.map_err(|e| {
            Error::new(
                Step::Authorization,
                format!(
                    "could not listen on 127.0.0.1:{port} for the redirect (oauth redirect_port): {e}; stop what listens there, or register another redirect URI for the client and set redirect_port to its port"
                ),
            )
        })?;
        Ok(Listener { listener, redirect_uri: format!("http://127.0.0.1:{port}{CALLBACK}") })
    }

    /// Waits for the redirect with `state`. An error from the authorization server ends the wait
    /// with an error; a redirect with another state is refused (400) and other requests (a
    /// favicon) are answered 404, and the wait goes on.
    pub async fn wait(self, state: &str) -> Result<Callback, Error> {
        let fail = |cause: String| Error::new(Step::Authorization, cause);
        loop {
            let (mut stream, _) = self.listener.accept().await.map_err(|e| fail(e.to_string()))?;
            let Ok(Ok(head)) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await else {
                continue;
            };
            let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
            let Ok(url) = url::Url::parse(&format!("http://127.0.0.1{target}")) else {
                answer(&mut stream, 400, "Bad request.").await;
                continue;
            };
            if url.path() != CALLBACK {
                answer(&mut stream, 404, "Not found.").await;
                continue;
            }
            let param = |name: &str| url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned());
            if param("state").as_deref() != Some(state) {
                // Not this sign-in's answer (an old tab, another program): refused, and the wait
                // goes on, so that no one on this machine can cancel a sign-in by a request.
                answer(&mut stream, 400, "Sign-in refused: this answer is not for the sign-in switchyard started.")
                    .await;
                tracing::warn!(
                    "refused a redirect whose state is not the one this sign-in sent (an old sign-in's tab, or another program); still waiting for the sign-in"
                );
                continue;
            }
            if let Some(error) = param("error") {
                answer(&mut stream, 400, "Sign-in failed. You can close this tab.").await;
                let about = param("error_description").map(|d| format!(": {d}")).unwrap_or_default();
                return Err(fail(format!("the authorization server answered {error}{about}")));
            }
            let Some(code) = param("code") else {
                answer(&mut stream, 400, "Sign-in failed: no code. You can close this tab.").await;
                return Err(fail("the redirect carried no code".into()));
            };
            answer(&mut stream, 200, "Signed in to switchyard. You can close this tab.").await;
            return Ok(Callback { code: crate::Secret::new(code), iss: param("iss") });
        }
    }
}

async fn bind_any() -> Result<TcpListener, Error> {
    TcpListener::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| Error::new(Step::Authorization, format!("could not listen on 127.0.0.1 for the redirect: {e}")))
}

/// The request line and headers, up to the blank line.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_HEAD {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

async fn answer(stream: &mut TcpStream, status: u16, text: &str) {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Bad Request",
    };
    let body = format!("<!doctype html><title>switchyard</title><p>{text}</p>\n");
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/html; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\ncache-control: no-store\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Starts the browser on `url`: `$BROWSER` (a command, the URL as its last argument), else
/// the platform's opener. The command is not waited for (a browser may stay open); it is reaped
/// when it exits.
pub fn open_browser(url: &str) -> Result<(), String> {
    let browser = std::env::var("BROWSER").ok().filter(|b| !b.trim().is_empty());
    let mut child =
        browser_command(browser.is_some(), url).spawn().map_err(|e| format!("could not start the browser: {e}"))?;
    tokio::spawn(async move {
        if let Some(why) = browser_failed(&mut child, browser.is_some()).await {
            tracing::warn!("{why}");
        }
    });
    Ok(())
}

/// The command that opens `url`: `$BROWSER` (`from_env`), else the platform's opener
/// (`xdg-open`; `open` on macOS; on Windows the URL handler through `rundll32`, which parses no
/// shell syntax in the URL).
fn browser_command(from_env: bool, url: &str) -> tokio::process::Command {
    let mut cmd = if from_env && cfg!(windows) {
        // No shell to split it: `%BROWSER%` names the program, the URL is its one argument.
        let mut c = tokio::process::Command::new(std::env::var("BROWSER").unwrap_or_default());
        c.arg(url);
        c
    } else if from_env {
        // `$BROWSER` may hold arguments: the shell splits it; the URL goes as "$1", never
        // through the shell's parsing.
        let mut c = tokio::process::Command::new("sh");
        c.arg("-c").arg("$BROWSER \"$1\"").arg("switchyard-browser").arg(url);
        c
    } else if cfg!(windows) {
        let mut c = tokio::process::Command::new("rundll32.exe");
        c.arg("url.dll,FileProtocolHandler").arg(url);
        c
    } else {
        let opener = if cfg!(target_os = "macos") { "open" } else { "xdg-open" };
        let mut c = tokio::process::Command::new(opener);
        c.arg(url);
        c
    };
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    cmd
}

/// Why the browser command failed, once it has ended (None: it did not, as far as its exit
/// says). A browser that cannot start is otherwise silent, and the sign-in just waits out its
/// bound; this says so at once, with what to do.
async fn browser_failed(child: &mut tokio::process::Child, from_env: bool) -> Option<String> {
    let status = child.wait().await.ok()?;
    if status.success() {
        return None;
    }
    let what = if from_env { "the browser command in $BROWSER" } else { "xdg-open (or open)" };
    let how = match status.code() {
        Some(127) => "was not found (exit status 127)".to_string(),
        Some(code) => format!("failed (exit status {code})"),
        None => "was killed by a signal".to_string(),
    };
    Some(format!(
        "{what} {how}: open the sign-in URL logged above by hand, or sign in with `switchyard login NAME --no-browser`"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A browser command that is missing or fails is reported, with what to do; one that
    /// works is not. (Unix: `$BROWSER` through the shell; on Windows a missing program fails
    /// to start instead, which `open_browser` reports.)
    #[cfg(unix)]
    #[tokio::test]
    async fn a_browser_that_fails_is_reported() {
        let run = |browser: &'static str| async move {
            let mut cmd = browser_command(true, "http://127.0.0.1:1/authorize");
            cmd.env("BROWSER", browser);
            let mut child = cmd.spawn().unwrap();
            browser_failed(&mut child, true).await
        };
        let missing = run("/nonexistent/browser").await.expect("a missing browser is reported");
        assert!(missing.contains("$BROWSER was not found (exit status 127)"), "{missing}");
        assert!(missing.contains("switchyard login NAME --no-browser"), "{missing}");
        let failing = run("false").await.expect("a failing browser is reported");
        assert!(failing.contains("failed (exit status 1)"), "{failing}");
        assert_eq!(run("true").await, None);
    }

    async fn get(uri: &str) -> String {
        let url = url::Url::parse(uri).unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", url.port().unwrap())).await.unwrap();
        let target = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_string(),
        };
        s.write_all(format!("GET {target} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes()).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn the_redirect_with_the_state_gives_the_code() {
        let l = Listener::bind(None).await.unwrap();
        let uri = l.redirect_uri.clone();
        assert!(uri.starts_with("http://127.0.0.1:"));
        let wait = tokio::spawn(l.wait("s1"));
        assert!(get(&uri.replace("/callback", "/favicon.ico")).await.starts_with("HTTP/1.1 404"));
        assert!(get(&format!("{uri}?code=c1&state=s1&iss=https%3A%2F%2Fas")).await.starts_with("HTTP/1.1 200"));
        let cb = wait.await.unwrap().unwrap();
        assert_eq!(cb.code.expose(), "c1");
        assert_eq!(cb.iss.as_deref(), Some("https://as"));
    }

    /// A redirect with another state is refused, and does not end the sign-in: the one with
    /// its own state still completes it (a stray request must not cancel a sign-in).
    #[tokio::test]
    async fn a_redirect_with_another_state_is_refused_and_the_wait_goes_on() {
        let l = Listener::bind(None).await.unwrap();
        let uri = l.redirect_uri.clone();
        let wait = tokio::spawn(l.wait("mine"));
        assert!(get(&format!("{uri}?code=c1&state=theirs")).await.starts_with("HTTP/1.1 400"));
        assert!(get(&format!("{uri}?code=c2")).await.starts_with("HTTP/1.1 400"));
        assert!(!wait.is_finished());
        assert!(get(&format!("{uri}?code=c3&state=mine")).await.starts_with("HTTP/1.1 200"));
        assert_eq!(wait.await.unwrap().unwrap().code.expose(), "c3");
    }

    /// Between the drop and the bind, another test running at the same time may be given the
    /// freed port; that run proves nothing either way, so it is tried again.
    #[tokio::test]
    async fn the_registered_port_is_reused_when_free() {
        for _ in 0..5 {
            let first = Listener::bind(None).await.unwrap();
            let uri = first.redirect_uri.clone();
            drop(first);
            let again = Listener::bind(Some(&uri)).await.unwrap();
            if again.redirect_uri == uri {
                return;
            }
        }
        panic!("the freed registered port was not bound again in five tries");
    }

    #[tokio::test]
    async fn a_taken_registered_port_gives_way_to_another() {
        let holder = Listener::bind(None).await.unwrap();
        let other = Listener::bind(Some(&holder.redirect_uri)).await.unwrap();
        assert_ne!(other.redirect_uri, holder.redirect_uri);
        assert!(other.redirect_uri.starts_with("http://127.0.0.1:") && other.redirect_uri.ends_with("/callback"));
    }
}
