//! The flow against an in-process authorization server and resource: discovery order, PKCE,
//! `iss`, refresh before expiry, step-up, and what errors show.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::*;

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
    json(
        serde_json::json!({"resource": format!("{base}/mcp"), "authorization_servers": [base], "scopes_supported": ["files:read"]}),
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
    }))
}

async fn register(State(s): State<Shared>, body: Bytes) -> Response {
    let mut f = s.lock().unwrap();
    f.seen.push("POST register".into());
    let asked: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(asked["redirect_uris"][0].as_str().unwrap().split(':').next(), Some("http"));
    json(serde_json::json!({"client_id": "client-1", "token_endpoint_auth_method": "none"}))
}

async fn authorize(State(s): State<Shared>, RawQuery(q): RawQuery) -> Response {
    let mut f = s.lock().unwrap();
    f.seen.push("GET authorize".into());
    let pairs = query_of(&q);
    assert_eq!(field(&pairs, "code_challenge_method"), Some("S256"));
    assert_eq!(field(&pairs, "resource"), Some(format!("{}/mcp", f.base).as_str()));
    f.challenge = field(&pairs, "code_challenge").map(str::to_string);
    f.scopes_asked.push(field(&pairs, "scope").unwrap_or("").to_string());
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
    let mut f = s.lock().unwrap();
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let grant = field(&pairs, "grant_type").unwrap().to_string();
    f.seen.push(format!("POST token {grant}"));
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
    let (fake, url) = start(|f| f.expires_in = 30).await;
    let dir = tempfile::tempdir().unwrap();
    let a = auth(&url, dir.path());
    a.refused(401, Some(&www(&url)), None, &*follow()).await.unwrap();
    // 30 s left is within the margin: the next bearer is a refreshed one.
    assert_eq!(a.bearer().await.unwrap().expose(), "secret-access-2");
    let f = fake.lock().unwrap();
    assert_eq!(f.seen.last().unwrap(), "POST token refresh_token");
    assert_eq!(f.seen.iter().filter(|s| *s == "GET authorize").count(), 1);
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
