//! The flow against an in-process authorization server and resource: discovery order, PKCE,
//! `iss`, refresh before expiry, step-up, and what errors show.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use sha2::Digest;

use url::Url;

use super::*;
use crate::refresh::EARLY_REFRESH_WAIT;
use crate::register::pick_method;
use crate::sign_in::SIGN_IN_SLACK;

/// What the fake authorization server does, and what it saw.
#[derive(Default)]
struct Fake {
    base: String,
    /// Every request, as `METHOD path`.
    seen: Vec<String>,
    /// `iss` in the redirect: the issuer (None), this value (Some(Some)), or none (Some(None)).
    iss: Option<Option<String>>,
    advertise_iss: bool,
    expires_in: u64,
    challenge: Option<String>,
    issued: u32,
    scopes_asked: Vec<String>,
    verifier_ok: Vec<bool>,
    /// The `redirect_uri` of each authorization request.
    redirects: Vec<String>,
    /// The `prompt` of each authorization request.
    prompts: Vec<Option<String>>,
    /// `scopes_supported` in the metadata.
    scopes_supported: Option<Vec<&'static str>>,
    /// Clients registered so far (the n-th is `client-n`).
    registered: u32,
    /// Client ids the token endpoint no longer knows (a registration expired or forgotten).
    unknown_clients: Vec<String>,
    /// Refresh grants are refused (`invalid_grant`).
    refuse_refresh: bool,
    /// The authorization server the resource metadata names, when not this one.
    authorization_server: Option<String>,
    /// How long the token endpoint takes to answer.
    token_delay: Option<Duration>,
}

type Shared = Arc<Mutex<Fake>>;

fn query_of(q: &Option<String>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(q.as_deref().unwrap_or("").as_bytes()).into_owned().collect()
}

fn field<'a>(pairs: &'a [(String, String)], k: &str) -> Option<&'a str> {
    pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str())
}

async fn prm(State(s): State<Shared>) -> Response {
    let mut f = s.lock().unwrap();
    f.seen.push("GET prm".into());
    let base = f.base.clone();
    let server = f.authorization_server.clone().unwrap_or_else(|| base.clone());
    json(
        serde_json::json!({"resource": format!("{base}/mcp"), "authorization_servers": [server], "scopes_supported": ["files:read"]}),
    )
}

async fn as_metadata(State(s): State<Shared>) -> Response {
    let mut f = s.lock().unwrap();
    f.seen.push("GET as".into());
    let base = f.base.clone();
    json(serde_json::json!({
        "issuer": base,
        "authorization_endpoint": format!("{base}/authorize"),
        "token_endpoint": format!("{base}/token"),
        "registration_endpoint": format!("{base}/register"),
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none"],
        "authorization_response_iss_parameter_supported": f.advertise_iss,
        "scopes_supported": f.scopes_supported,
    }))
}

async fn register(State(s): State<Shared>, body: Bytes) -> Response {
    let mut f = s.lock().unwrap();
    f.seen.push("POST register".into());
    let asked: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(asked["redirect_uris"][0].as_str().unwrap().split(':').next(), Some("http"));
    f.registered += 1;
    json(serde_json::json!({"client_id": format!("client-{}", f.registered), "token_endpoint_auth_method": "none"}))
}

async fn authorize(State(s): State<Shared>, RawQuery(q): RawQuery) -> Response {
    let mut f = s.lock().unwrap();
    f.seen.push("GET authorize".into());
    let pairs = query_of(&q);
    assert_eq!(field(&pairs, "code_challenge_method"), Some("S256"));
    assert_eq!(field(&pairs, "resource"), Some(format!("{}/mcp", f.base).as_str()));
    f.challenge = field(&pairs, "code_challenge").map(str::to_string);
    f.scopes_asked.push(field(&pairs, "scope").unwrap_or("").to_string());
    f.redirects.push(field(&pairs, "redirect_uri").unwrap().to_string());
    f.prompts.push(field(&pairs, "prompt").map(str::to_string));
    let mut to = url::Url::parse(field(&pairs, "redirect_uri").unwrap()).unwrap();
    to.query_pairs_mut().append_pair("code", "code-1").append_pair("state", field(&pairs, "state").unwrap());
    match f.iss.clone() {
        None => {
            to.query_pairs_mut().append_pair("iss", &f.base);
        }
        Some(Some(other)) => {
            to.query_pairs_mut().append_pair("iss", &other);
        }
        Some(None) => {}
    }
    (StatusCode::FOUND, [(header::LOCATION, to.to_string())]).into_response()
}

async fn token(State(s): State<Shared>, body: Bytes) -> Response {
    let delay = s.lock().unwrap().token_delay;
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    let mut f = s.lock().unwrap();
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let grant = field(&pairs, "grant_type").unwrap().to_string();
    f.seen.push(format!("POST token {grant}"));
    if f.refuse_refresh && grant == "refresh_token" {
        let body = serde_json::json!({"error": "invalid_grant"});
        return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "application/json")], body.to_string())
            .into_response();
    }
    if f.unknown_clients.iter().any(|c| Some(c.as_str()) == field(&pairs, "client_id")) {
        let body = serde_json::json!({"error": "invalid_client", "error_description": "client is invalid"});
        return (StatusCode::UNAUTHORIZED, [(header::CONTENT_TYPE, "application/json")], body.to_string())
            .into_response();
    }
    if grant == "authorization_code" {
        let verifier = field(&pairs, "code_verifier").unwrap_or("");
        let computed =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        let ok = Some(computed) == f.challenge;
        f.verifier_ok.push(ok);
    }
    f.issued += 1;
    let n = f.issued;
    let scope = f.scopes_asked.last().cloned().unwrap_or_default();
    json(serde_json::json!({
        "access_token": format!("secret-access-{n}"), "token_type": "Bearer",
        "refresh_token": format!("secret-refresh-{n}"), "expires_in": f.expires_in, "scope": scope,
    }))
}

async fn mcp(State(s): State<Shared>, headers: HeaderMap) -> Response {
    let mut f = s.lock().unwrap();
    f.seen.push("POST mcp".into());
    let base = f.base.clone();
    let _ = headers;
    (
        StatusCode::UNAUTHORIZED,
        [(
            header::WWW_AUTHENTICATE,
            format!(r#"Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp""#),
        )],
    )
        .into_response()
}

fn json(v: serde_json::Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

/// Starts the fake; its state and the MCP endpoint's URL.
async fn start(setup: impl FnOnce(&mut Fake)) -> (Shared, Url) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let mut fake = Fake { base: base.clone(), advertise_iss: true, expires_in: 3600, ..Fake::default() };
    setup(&mut fake);
    let shared = Arc::new(Mutex::new(fake));
    let app = Router::new()
        .route("/.well-known/oauth-protected-resource/mcp", get(prm))
        .route("/.well-known/oauth-authorization-server", get(as_metadata))
        .route("/register", post(register))
        .route("/authorize", get(authorize))
        .route("/token", post(token))
        .route("/mcp", post(mcp))
        .with_state(shared.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (shared, Url::parse(&format!("{base}/mcp")).unwrap())
}

/// A browser that follows the redirects (to the loopback listener).
fn follow() -> Box<Announce> {
    Box::new(|url: &str| {
        let url = url.to_string();
        tokio::spawn(async move {
            let _ = reqwest::Client::new().get(url).send().await;
        });
    })
}

fn auth(url: &Url, dir: &Path) -> Auth {
    let settings = Settings { open_browser: false, login_timeout: Duration::from_secs(10), ..Settings::default() };
    Auth::new(url.clone(), settings, dir).unwrap()
}

fn www(base: &Url) -> Challenge {
    Challenge {
        resource_metadata: Some(format!(
            "{}/.well-known/oauth-protected-resource/mcp",
            base.origin().ascii_serialization()
        )),
        ..Challenge::default()
    }
}

#[tokio::test]
async fn a_401_signs_in_with_pkce_and_the_token_is_kept() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    assert_eq!(a.bearer().await, None);
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-1");
    {
        let f = fake.lock().unwrap();
        assert_eq!(f.seen, ["GET prm", "GET as", "POST register", "GET authorize", "POST token authorization_code"]);
        assert_eq!(f.verifier_ok, [true]);
        // Scope from the resource metadata, as no challenge named one.
        assert_eq!(f.scopes_asked, ["files:read"]);
    }
    // A second Auth (another process) reads the file.
    assert_eq!(auth(&url, dir.path()).bearer().await.unwrap().expose(), "secret-access-1");
    assert!(a.status().signed_in);
}

/// A client registered by hand with a fixed redirect URI: the sign-in listens on exactly that
/// port, and says so when it cannot.
#[tokio::test]
async fn redirect_port_fixes_the_redirect_uri_and_a_taken_port_is_named() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let settings = Settings {
        client_id: Some("by-hand".into()),
        redirect_port: Some(port),
        open_browser: false,
        login_timeout: Duration::from_secs(10),
        ..Settings::default()
    };
    let a = Auth::new(url.clone(), settings.clone(), dir.path()).unwrap();
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-1");
    {
        let f = fake.lock().unwrap();
        assert_eq!(f.redirects, [format!("http://127.0.0.1:{port}/callback")]);
        assert!(!f.seen.iter().any(|s| s.contains("register")), "a client id given by hand is not registered");
    }
    // The port taken by something else: the sign-in fails at once, naming it.
    let _squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let other = tempfile::tempdir().unwrap();
    let b = Auth::new(url.clone(), settings, other.path()).unwrap();
    let e = b.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap_err().to_string();
    assert!(e.contains(&format!("could not listen on 127.0.0.1:{port}")) && e.contains("redirect_port"), "{e}");
    assert_eq!(fake.lock().unwrap().redirects.len(), 1, "no browser was sent to a redirect nobody listens to");
}

#[tokio::test]
async fn without_a_challenge_the_path_aware_well_known_url_is_found() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    let status = a.login(&*follow()).await.unwrap();
    assert!(status.signed_in);
    let seen = fake.lock().unwrap().seen.clone();
    assert_eq!(&seen[..3], ["POST mcp", "GET prm", "GET as"]);
}

#[tokio::test]
async fn an_iss_of_another_issuer_is_refused_before_the_token_request() {
    let (fake, url) = start(|f| f.iss = Some(Some("https://evil.example.com".into()))).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    let err = a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap_err();
    assert_eq!(err.step, Step::Authorization);
    assert!(err.to_string().contains("https://evil.example.com"), "{err}");
    assert!(!fake.lock().unwrap().seen.iter().any(|s| s.starts_with("POST token")));
    assert_eq!(a.bearer().await, None);
}

#[tokio::test]
async fn a_missing_iss_is_refused_only_where_the_server_promised_one() {
    let (fake, url) = start(|f| f.iss = Some(None)).await;
    let dir = tempfile::tempdir().unwrap();
    let err = auth(&url, dir.path()).refused(401, Some(&www(&url)), None, &*follow()).await.unwrap_err();
    assert!(err.to_string().contains("promises an `iss`"), "{err}");
    assert!(!fake.lock().unwrap().seen.iter().any(|s| s.starts_with("POST token")));

    let (_fake, url) = start(|f| {
        f.iss = Some(None);
        f.advertise_iss = false;
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    auth(&url, dir.path()).refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
}

#[tokio::test]
async fn a_token_about_to_expire_is_refreshed_before_it_is_sent() {
    let (fake, url) = start(|f| f.expires_in = 3600).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-1");
    // 30 s left is within the margin (60 s): the next bearer is a refreshed one.
    a.age(3570);
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-2");
    let f = fake.lock().unwrap();
    assert_eq!(f.seen.last().unwrap(), "POST token refresh_token");
    assert_eq!(f.seen.iter().filter(|s| *s == "GET authorize").count(), 1);
}

/// A token that lives less than the margin is refreshed at half its life, not before every
/// request (each refresh would give one as short, due at once again).
#[tokio::test]
async fn a_short_lived_token_is_refreshed_at_half_its_life_not_at_every_request() {
    let (fake, url) = start(|f| f.expires_in = 30).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    for _ in 0..3 {
        assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-1");
    }
    a.age(16);
    for _ in 0..3 {
        assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-2");
    }
    let f = fake.lock().unwrap();
    assert_eq!(f.seen.iter().filter(|s| *s == "POST token refresh_token").count(), 1, "{:?}", f.seen);
}

#[tokio::test]
async fn a_401_with_a_refresh_token_refreshes_instead_of_signing_in_again() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    let sent = a.bearer().await;
    a.refused(401, Some(&www(&url)), sent.as_ref(), &*follow()).await.unwrap();
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-2");
    assert_eq!(fake.lock().unwrap().seen.iter().filter(|s| *s == "GET authorize").count(), 1);
    // A 401 for a token already replaced waits for nothing.
    a.refused(401, Some(&www(&url)), sent.as_ref(), &*follow()).await.unwrap();
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-2");
}

/// A registration the authorization server forgot (it restarted, or the registration expired)
/// is forgotten here too: the refresh it fails is followed by a sign-in that registers anew,
/// not by a browser sent with a client id nobody knows.
#[tokio::test]
async fn a_registration_the_server_forgot_is_registered_anew() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    fake.lock().unwrap().unknown_clients.push("client-1".into());
    let sent = a.bearer().await;
    a.refused(401, Some(&www(&url)), sent.as_ref(), &*follow()).await.unwrap();
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-2");
    {
        let f = fake.lock().unwrap();
        assert_eq!(f.registered, 2, "{:?}", f.seen);
        assert_eq!(f.seen.iter().filter(|s| *s == "POST token refresh_token").count(), 1, "{:?}", f.seen);
    }
    let stored = a.store().load();
    assert_eq!(stored.clients.values().map(|c| c.client_id.as_str()).collect::<Vec<_>>(), ["client-2"]);
}

/// A request of switchyard's own (a health ping) renews a token by refresh, but never starts a
/// sign-in: no browser opens for a request no user made.
#[tokio::test]
async fn a_quiet_refusal_refreshes_but_never_signs_in() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    let e = a.refused_quietly(401, Some(&www(&url)), None).await.unwrap_err();
    assert!(e.to_string().contains("starts no sign-in"), "{e}");
    assert!(!fake.lock().unwrap().seen.iter().any(|s| s == "GET authorize" || s == "POST register"));
    // Signed in: a refusal of the token in force is answered by a refresh.
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    let sent = a.bearer().await;
    a.refused_quietly(401, Some(&www(&url)), sent.as_ref()).await.unwrap();
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-2");
    // A refresh that fails leaves it refused, still without a sign-in.
    fake.lock().unwrap().unknown_clients.push("client-1".into());
    let sent = a.bearer().await;
    a.refused_quietly(401, Some(&www(&url)), sent.as_ref()).await.unwrap_err();
    assert_eq!(fake.lock().unwrap().seen.iter().filter(|s| *s == "GET authorize").count(), 1);
}

/// Two processes share one token file (the daemon and a `run --url`, say): when one has
/// refreshed, the other takes the tokens it kept rather than refreshing with the refresh token
/// it held, which a server that rotates refresh tokens refuses (and may revoke the family for).
#[tokio::test]
async fn a_refresh_another_process_made_is_taken_not_repeated() {
    let (fake, url) = start(|f| f.expires_in = 30).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    a.age(16);
    let b = auth(&url, dir.path());
    assert_eq!(b.current().unwrap().expose(), "secret-access-1");
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-2");
    assert_eq!(b.bearer().await.unwrap().expose(), "secret-access-2");
    let f = fake.lock().unwrap();
    assert_eq!(f.seen.iter().filter(|s| *s == "POST token refresh_token").count(), 1, "{:?}", f.seen);
}

/// Two processes that meet a 401 at once (two `run --url` of one server, started by a client
/// for two sessions) sign in once: the second waits for the first and takes its tokens, with
/// no second registration and no second browser tab.
#[tokio::test]
async fn two_processes_refused_at_once_sign_in_once() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (auth(&url, dir.path()), auth(&url, dir.path()));
    let (challenge, browser) = (www(&url), follow());
    let (ra, rb) = tokio::join!(
        a.refused(401, Some(&challenge), None, &*browser),
        b.refused(401, Some(&challenge), None, &*browser)
    );
    ra.unwrap();
    rb.unwrap();
    assert_eq!(a.current().unwrap().expose(), "secret-access-1");
    assert_eq!(b.current().unwrap().expose(), "secret-access-1");
    let f = fake.lock().unwrap();
    assert_eq!(f.seen.iter().filter(|s| *s == "GET authorize").count(), 1, "{:?}", f.seen);
    assert_eq!(f.registered, 1, "{:?}", f.seen);
}

/// A sign-in waiting for a browser that never comes ends as soon as another process (the
/// `switchyard login` its message advises) has signed in: the waiting call goes on with those
/// tokens instead of failing when the wait is over.
#[tokio::test]
async fn a_login_elsewhere_ends_a_waiting_sign_in() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let waiting = auth(&url, dir.path());
    let nobody: Box<Announce> = Box::new(|_: &str| {});
    let (challenge, started) = (www(&url), std::time::Instant::now());
    let (waited, logged_in) = tokio::join!(waiting.refused(401, Some(&challenge), None, &*nobody), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        auth(&url, dir.path()).login(&*follow()).await
    });
    logged_in.unwrap();
    waited.unwrap();
    assert!(started.elapsed() < Duration::from_secs(8), "waited out the sign-in: {:?}", started.elapsed());
    assert_eq!(waiting.current().unwrap().expose(), "secret-access-1");
    assert_eq!(fake.lock().unwrap().issued, 1);
}

/// A slow authorization server does not hold a request whose token is still valid: after a
/// short wait the token goes as it is, and `status` says the refresh is failing.
#[tokio::test]
async fn a_slow_refresh_of_a_valid_token_does_not_hold_the_request() {
    let (fake, url) = start(|f| f.expires_in = 3600).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    a.age(3570);
    fake.lock().unwrap().token_delay = Some(Duration::from_secs(30));
    let started = std::time::Instant::now();
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-1");
    let took = started.elapsed();
    assert!(took >= EARLY_REFRESH_WAIT && took < EARLY_REFRESH_WAIT * 2, "{took:?}");
    assert_eq!(a.status().state, crate::State::RefreshFailing);
    // An expired token is not held for the slow refresh either: its refusal refreshes (or
    // signs in) within the sign-in's own bound, which a wait here would add to.
    let b = auth(&url, dir.path());
    b.age(60);
    let started = std::time::Instant::now();
    assert_eq!(b.bearer().await.unwrap().expose(), "secret-access-1");
    assert!(started.elapsed() < EARLY_REFRESH_WAIT * 2, "{:?}", started.elapsed());
}

/// A refused request waits for its sign-in at most `login_timeout_ms` and a moment, even when
/// the authorization server hangs (it accepts and never answers).
#[tokio::test]
async fn a_hanging_authorization_server_holds_a_refused_request_only_so_long() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings { open_browser: false, login_timeout: Duration::from_secs(1), ..Settings::default() };
    auth(&url, dir.path()).refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    let a = Auth::new(url.clone(), settings, dir.path()).unwrap();
    fake.lock().unwrap().token_delay = Some(Duration::from_secs(60));
    let started = std::time::Instant::now();
    let sent = a.current();
    let e = a.refused(401, Some(&www(&url)), sent.as_ref(), &*follow()).await.unwrap_err();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1) + SIGN_IN_SLACK + Duration::from_secs(2), "{took:?}");
    assert_eq!(e.step, Step::SignIn);
    assert!(
        e.timed_out && e.cause.contains("did not finish within 6 s (login_timeout_ms of 1 s, and 5 s more)"),
        "{e}"
    );
}

/// A refresh before sending that fails is not asked for again by every request that follows:
/// they send the token as it is for a while (a refusal of it still signs in).
#[tokio::test]
async fn a_failed_refresh_is_not_repeated_by_every_request() {
    let (fake, url) = start(|f| f.expires_in = 30).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    assert_eq!(a.status().state, crate::State::SignedIn);
    fake.lock().unwrap().refuse_refresh = true;
    a.age(16);
    for _ in 0..5 {
        assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-1");
    }
    {
        let f = fake.lock().unwrap();
        assert_eq!(f.seen.iter().filter(|s| *s == "POST token refresh_token").count(), 1, "{:?}", f.seen);
    }
    // `status` says so, with the cause, and not with any token.
    let status = a.status();
    assert_eq!(status.state, crate::State::RefreshFailing);
    let shown = serde_json::to_string(&status).unwrap();
    assert!(shown.contains("refresh_failing") && shown.contains("refreshing the token failed"), "{shown}");
    assert!(!shown.contains("secret-"), "{shown}");
    // Tokens another process got in the meantime are not failing.
    fake.lock().unwrap().refuse_refresh = false;
    let b = auth(&url, dir.path());
    b.age(16);
    assert_eq!(b.bearer().await.unwrap().expose(), "secret-access-2");
    a.refused(401, Some(&www(&url)), Some(&Secret::new("secret-access-1")), &*follow()).await.unwrap();
    assert_eq!(a.status().state, crate::State::SignedIn);
}

/// `switchyard login` registers anew (the server may have forgotten the registration, and only
/// its error page would say so); a sign-in that nobody completes keeps the client it registered,
/// so trying again does not register one more.
#[tokio::test]
async fn login_registers_anew_and_a_failed_sign_in_keeps_its_registration() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings { open_browser: false, login_timeout: Duration::from_millis(300), ..Settings::default() };
    let a = Auth::new(url.clone(), settings, dir.path()).unwrap();
    a.refused(401, Some(&www(&url)), None, &|_: &str| {}).await.unwrap_err();
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    assert_eq!(fake.lock().unwrap().registered, 1, "the failed sign-in's client was used again");
    a.login(&*follow()).await.unwrap();
    assert_eq!(fake.lock().unwrap().registered, 2);
    let stored = a.store().load();
    assert_eq!(stored.clients.values().map(|c| c.client_id.as_str()).collect::<Vec<_>>(), ["client-2"]);
}

/// An OpenID provider keeps `offline_access`, and so issues a refresh token, only when the
/// request asks for consent (oidc-provider drops the scope otherwise).
#[tokio::test]
async fn offline_access_is_asked_for_with_prompt_consent_where_offered() {
    let (fake, url) = start(|f| f.scopes_supported = Some(vec!["offline_access", "files:read"])).await;
    let dir = tempfile::tempdir().unwrap();
    auth(&url, dir.path()).refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    {
        let f = fake.lock().unwrap();
        assert_eq!(f.scopes_asked, ["files:read offline_access"]);
        assert_eq!(f.prompts, [Some("consent".to_string())]);
    }
    // A server that does not offer it gets neither.
    let (fake, url) = start(|f| f.scopes_supported = Some(vec!["files:read"])).await;
    let dir = tempfile::tempdir().unwrap();
    auth(&url, dir.path()).refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    let f = fake.lock().unwrap();
    assert_eq!(f.scopes_asked, ["files:read"]);
    assert_eq!(f.prompts, [None]);
}

#[tokio::test]
async fn insufficient_scope_steps_up_with_the_union_once() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    let first = Challenge { scope: Some("files:read".into()), ..www(&url) };
    a.refused(401, Some(&first), None, &*follow()).await.unwrap();
    let more = Challenge { scope: Some("files:write".into()), error: Some("insufficient_scope".into()), ..www(&url) };
    let sent = a.bearer().await;
    a.refused(403, Some(&more), sent.as_ref(), &*follow()).await.unwrap();
    assert_eq!(fake.lock().unwrap().scopes_asked, ["files:read", "files:read files:write"]);
    // The same challenge again: the token has the scope already, so no third sign-in.
    let sent = a.bearer().await;
    let err = a.refused(403, Some(&more), sent.as_ref(), &*follow()).await.unwrap_err();
    assert_eq!(err.step, Step::StepUp);
    assert_eq!(fake.lock().unwrap().scopes_asked.len(), 2);
}

/// An authorization server that cannot be reached is named as such, not reported as a failed
/// registration at its default endpoints; a server that cannot be reached fails `login` as
/// itself.
#[tokio::test]
async fn an_unreachable_server_is_named_as_unreachable() {
    // Bound and never listening: connections are refused, and no other test is given the port.
    let held = tokio::net::TcpSocket::new_v4().unwrap();
    held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let down = format!("http://127.0.0.1:{}", held.local_addr().unwrap().port());
    let (fake, url) = start(|f| f.authorization_server = Some(down.clone())).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    let e = a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap_err();
    assert_eq!(e.step, Step::Discovery, "{e}");
    assert!(e.cause.contains(&format!("could not reach the authorization server {down}")), "{e}");
    assert!(!fake.lock().unwrap().seen.iter().any(|s| s.contains("register")));

    // A wrong path: the server answers 404, which is not a request to sign in.
    let wrong = Url::parse(&format!("{}/wrong", url.origin().ascii_serialization())).unwrap();
    let e = auth(&wrong, dir.path()).login(&*follow()).await.unwrap_err();
    assert!(e.cause.contains("answered HTTP 404 without asking for a sign-in"), "{e}");
    assert!(!fake.lock().unwrap().seen.iter().any(|s| s.contains("register")));

    let gone = Url::parse(&format!("{down}/mcp")).unwrap();
    let e = auth(&gone, dir.path()).login(&*follow()).await.unwrap_err();
    assert!(e.cause.contains(&format!("could not reach the server {gone}")), "{e}");
}

#[tokio::test]
async fn a_sign_in_nobody_completes_times_out() {
    let (_fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings { open_browser: false, login_timeout: Duration::from_millis(300), ..Settings::default() };
    let a = Auth::new(url.clone(), settings, dir.path()).unwrap();
    let err = a.refused(401, Some(&www(&url)), None, &|_: &str| {}).await.unwrap_err();
    assert!(err.timed_out);
}

#[tokio::test]
async fn errors_and_debug_output_never_show_a_token() {
    let (_fake, url) = start(|f| f.iss = Some(Some("https://evil.example.com".into()))).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    let err = a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap_err();
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains("code-1"), "{text}");
    }
    let (_fake, url) = start(|_| {}).await;
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    let stored = a.store().load();
    for text in [format!("{stored:?}"), format!("{a:?}"), format!("{:?}", a.bearer().await)] {
        assert!(!text.contains("secret-"), "{text}");
    }
}

#[test]
fn a_pre_registered_secret_uses_basic_unless_only_post_is_offered() {
    let post = vec!["client_secret_post".to_string()];
    assert_eq!(pick_method(None, true), "client_secret_basic");
    assert_eq!(pick_method(Some(&post), true), "client_secret_post");
    assert_eq!(pick_method(Some(&post), false), "none");
}

#[tokio::test]
async fn a_sign_in_or_sign_out_by_another_process_is_taken_in() {
    let (_fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let running = auth(&url, dir.path());
    assert_eq!(running.bearer().await, None);
    // `switchyard login` in another process.
    let login = auth(&url, dir.path());
    login.login(&*follow()).await.unwrap();
    assert_eq!(running.bearer().await.unwrap().expose(), "secret-access-1");
    // `switchyard logout`.
    assert!(login.logout().unwrap());
    assert_eq!(running.bearer().await, None);
    assert!(!running.status().signed_in);
}

#[tokio::test]
async fn requests_that_waited_for_a_failed_sign_in_share_its_error() {
    let (fake, url) = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = Settings { open_browser: false, login_timeout: Duration::from_millis(400), ..Settings::default() };
    let a = Arc::new(Auth::new(url.clone(), settings, dir.path()).unwrap());
    let started = std::time::Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|_| {
            let a = a.clone();
            let c = www(&url);
            tokio::spawn(async move { a.refused(401, Some(&c), None, &|_: &str| {}).await })
        })
        .collect();
    for call in calls {
        assert!(call.await.unwrap().unwrap_err().timed_out);
    }
    // One sign-in's wait, not three in a row.
    assert!(started.elapsed() < Duration::from_millis(1100), "{:?}", started.elapsed());
    assert_eq!(fake.lock().unwrap().seen.iter().filter(|s| *s == "GET prm").count(), 1);
    // A later request tries again.
    assert!(a.refused(401, Some(&www(&url)), None, &|_: &str| {}).await.unwrap_err().timed_out);
    assert_eq!(fake.lock().unwrap().seen.iter().filter(|s| *s == "GET prm").count(), 2);
}
