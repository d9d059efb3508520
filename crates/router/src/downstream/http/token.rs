//! The HTTP front's bearer token: the user's own (`[http] token`), or one generated on first use
//! and kept in a 0600 file in the private state directory, read back on later starts so clients
//! keep working. `switchyard token` prints it.

use std::io::{Read, Write};
use std::path::Path;

use anyhow::{Context, bail};
use base64::Engine;
use sha2::Digest;

use switchyard_config::paths;
use switchyard_config::{self as config, Config, HttpConfig};

/// Random bytes in a generated token (256 bits).
const TOKEN_BYTES: usize = 32;
/// What a generated token starts with, so one found in a file or a leak report is recognised.
const PREFIX: &str = "sy_";

/// A bearer token. Debug and Display print `***`: it never reaches a log by accident; only
/// [`Token::expose`] gives the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token of the user's own, as [`HttpConfig::token_value`] gives it (checked there).
    pub fn new(value: String) -> Token {
        Token(value)
    }

    /// A new random token: `sy_` and 43 characters of base64url (32 bytes from getrandom).
    pub fn generate() -> std::io::Result<Token> {
        let bytes = random::<TOKEN_BYTES>()?;
        Ok(Token(format!("{PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))))
    }

    /// The value, for the one place that must show or send it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the value: what a presented token is compared through, so the comparison
    /// takes the same steps whatever prefix of the secret a guess shares.
    pub fn digest(&self) -> [u8; 32] {
        sha2::Sha256::digest(self.0.as_bytes()).into()
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// The token of a daemon whose HTTP settings are `http`: `[http] token` with its variables read
/// through `env`, else the generated one in `file` (made when missing).
pub fn for_daemon(
    http: Option<&HttpConfig>,
    file: &Path,
    env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
) -> anyhow::Result<Token> {
    if let Some(value) = http.map(|h| h.token_value(env)).transpose()?.flatten() {
        return Ok(Token::new(value));
    }
    load_or_create(file)
}

/// The tokens a front takes: the daemon's own, and the named ones of `[http.tokens]` (Debug
/// shows the names only).
#[derive(Debug)]
pub struct Tokens {
    pub daemon: Token,
    /// By name.
    pub named: Vec<(String, Token)>,
}

/// `[http.tokens]` with their variables read through `env`. Two entries with one value (or
/// one with the daemon's token) are refused: the front could not tell whose a request is.
pub fn named_for_daemon(
    http: &HttpConfig,
    daemon: &Token,
    env: &dyn Fn(&str) -> Result<String, std::env::VarError>,
) -> anyhow::Result<Vec<(String, Token)>> {
    let named: Vec<(String, Token)> =
        http.named_token_values(env)?.into_iter().map(|(name, value)| (name, Token::new(value))).collect();
    for (i, (name, token)) in named.iter().enumerate() {
        if token == daemon {
            bail!(
                "[http.tokens] {name} has the daemon's own token as its value: give each named token a value of its own (the front tells clients apart by their token)"
            );
        }
        if let Some((other, _)) = named[..i].iter().find(|(_, t)| t == token) {
            bail!(
                "[http.tokens] {other} and {name} have the same value: give each named token a value of its own (the front tells clients apart by their token)"
            );
        }
    }
    Ok(named)
}

/// The token in `file`, made first when there is none. The file is created exclusively, 0600,
/// with its whole content (written under a temporary name and linked into place, so a daemon
/// and `switchyard token` starting together agree on one token and never read a half-written
/// one). An existing file must be a regular file of this user's that no one else may read.
pub fn load_or_create(file: &Path) -> anyhow::Result<Token> {
    if let Some(token) = read(file)? {
        return Ok(token);
    }
    let dir = file.parent().context("the token file has no directory")?;
    paths::private_dir(dir)?;
    let token = Token::generate().context("cannot get random bytes for the HTTP token")?;
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    // Unique among this process's threads too (each writes its own candidate).
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{seq}.{}", std::process::id(), fastrand::u32(..)));
    let written = (|| {
        let mut f = switchyard_os::fs::private_options().write(true).create_new(true).open(&tmp)?;
        switchyard_os::fs::restrict(&tmp)?;
        f.write_all(format!("{}\n", token.expose()).as_bytes())?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write the HTTP token file {}", tmp.display()));
    }
    let linked = std::fs::hard_link(&tmp, file);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(token),
        // Another process made it first: its token is the one.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read(file)?.with_context(|| format!("the HTTP token file {} vanished as it was made", file.display()))
        }
        Err(e) => Err(e).with_context(|| format!("cannot create the HTTP token file {}", file.display())),
    }
}

/// Whether opening failed because the path is a symbolic link (O_NOFOLLOW's ELOOP).
fn is_loop(e: &std::io::Error) -> bool {
    #[cfg(unix)]
    return e.raw_os_error() == Some(libc::ELOOP);
    #[cfg(windows)]
    return {
        let _ = e;
        false
    };
}

/// The token in `file`, None when there is no such file.
fn read(file: &Path) -> anyhow::Result<Option<Token>> {
    let delete = format!("delete {} and a new token is made on the next start", file.display());
    let mut options = std::fs::OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NOFOLLOW);
    // Windows opens through a link whatever the flags: the link is seen before opening.
    let linked = cfg!(windows) && std::fs::symlink_metadata(file).is_ok_and(|m| m.file_type().is_symlink());
    let opened = if linked { Err(std::io::Error::other("a symbolic link")) } else { options.read(true).open(file) };
    let f = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if linked || is_loop(&e) => {
            bail!(
                "the HTTP token file {} is a symbolic link; switchyard reads its token only from a file of its own: {delete}",
                file.display()
            )
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read the HTTP token file {}", file.display())),
    };
    let meta = f.metadata().with_context(|| format!("cannot read the HTTP token file {}", file.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        check_file(file, meta.is_file(), meta.uid(), meta.mode(), rustix::process::getuid().as_raw())?;
    }
    #[cfg(windows)]
    if !meta.is_file() {
        bail!("the HTTP token file {} is not a file: {delete}", file.display());
    }
    let mut text = String::new();
    f.take(4096)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read the HTTP token file {}", file.display()))?;
    let value = text.trim_end();
    if !config::is_bearer_token(value) {
        bail!(
            "the HTTP token file {} holds no usable token (its content is not a bearer token); {delete}",
            file.display()
        );
    }
    Ok(Some(Token(value.to_string())))
}

#[cfg(unix)]
/// Whether a token file found on disk may be used: a regular file, this user's (uid `me`), that
/// no one else may read or write.
fn check_file(file: &Path, regular: bool, uid: u32, mode: u32, me: u32) -> anyhow::Result<()> {
    let f = file.display();
    if !regular {
        bail!("the HTTP token file {f} is not a regular file; delete it and a new token is made on the next start");
    }
    if uid != me {
        bail!(
            "the HTTP token file {f} belongs to uid {uid}, not to you (uid {me}); switchyard will not use a token someone else wrote: delete it and a new one is made on the next start"
        );
    }
    if mode & 0o077 != 0 {
        bail!(
            "the HTTP token file {f} is open to other users (mode {:04o}): run `chmod 600 {f}`; if someone else may have read it, delete it instead and a new token is made on the next start",
            mode & 0o7777
        );
    }
    Ok(())
}

/// `switchyard token [--config FILE] [--url [--http ADDR]]`: the token the daemon of that config
/// accepts (the generated file made when missing), or with `url` the status page's address
/// carrying it (`http://LISTEN/#token=T`; a fragment never reaches a server or its logs). The
/// address: `http` when given, else where the running daemon of that config serves HTTP
/// (`running`, given the canonical config: it may have been started with `--http`), else the
/// config's `[http] listen`, else the default. Only `[http]` decides the token: a mistake
/// elsewhere in the file (a misspelt server in `[groups]`) is said on stderr as a warning, and
/// the token printed, since the daemon keeps serving its last good config and its clients'
/// `SWITCHYARD_TOKEN=$(switchyard token)` must not break with it.
pub fn command(
    config: Option<&Path>,
    url: bool,
    http: Option<std::net::SocketAddr>,
    running: impl Fn(&Path) -> Option<std::net::SocketAddr>,
) -> anyhow::Result<String> {
    let path = match config {
        Some(c) => c.to_path_buf(),
        None => paths::default_config()?,
    };
    let canonical = paths::canonical_config(&path)?;
    let text = std::fs::read_to_string(&canonical)
        .with_context(|| format!("cannot read config file {}", canonical.display()))?;
    let read = Config::load_for(&canonical, &text, &["http"])?;
    if let Some(why) = &read.elsewhere {
        let _ = writeln!(
            std::io::stderr(),
            "warning: {why}\n(the token is from its [http] table, which loads; `switchyard check` shows what to fix)"
        );
    }
    let loaded = read.config;
    let token = for_daemon(loaded.http.as_ref(), &paths::token_for(&canonical)?, &|n| std::env::var(n))?;
    if !url {
        return Ok(format!("{}\n", token.expose()));
    }
    let listen = http
        .or_else(|| running(&canonical))
        .unwrap_or_else(|| loaded.http.as_ref().map_or(config::DEFAULT_HTTP_LISTEN, |h| h.listen));
    Ok(format!("{}\n", page_url(listen, &token)))
}

/// The status page of a front listening on `listen`, with the token in the fragment. An
/// address of every interface is reached through loopback (the front refuses `Host: 0.0.0.0`).
pub fn page_url(listen: std::net::SocketAddr, token: &Token) -> String {
    let mut at = listen;
    if at.ip().is_unspecified() {
        at.set_ip(match at.ip() {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{at}/#token={}", token.expose())
}

pub use switchyard_core::ids::random;

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn no_env(_: &str) -> Result<String, std::env::VarError> {
        Err(std::env::VarError::NotPresent)
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn a_generated_token_is_sy_and_43_base64url_characters_and_never_repeats() {
        let a = Token::generate().unwrap();
        let b = Token::generate().unwrap();
        assert_ne!(a, b);
        let rest = a.expose().strip_prefix("sy_").unwrap();
        assert_eq!(rest.len(), 43);
        assert!(rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{rest}");
        assert!(config::is_bearer_token(a.expose()));
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(rest).unwrap();
        assert_eq!(decoded.len(), 32);
    }

    #[test]
    fn debug_and_display_hide_the_value() {
        let t = Token::new("sy_secret".into());
        assert_eq!(format!("{t:?}"), "***");
        assert_eq!(format!("{t}"), "***");
        assert_eq!(format!("{:?}", Some(&t)), "Some(***)");
        assert_eq!(t.digest(), <[u8; 32]>::from(sha2::Sha256::digest(b"sy_secret")));
    }

    #[test]
    fn the_file_is_made_0600_in_a_private_dir_and_read_back_on_later_starts() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("state/switchyard/cfg-abc.token");
        let made = load_or_create(&file).unwrap();
        assert_eq!(mode(&file), 0o600);
        assert_eq!(mode(file.parent().unwrap()), 0o700);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{}\n", made.expose()));
        assert_eq!(load_or_create(&file).unwrap(), made);
        // No temporary file is left beside it.
        let names: Vec<_> =
            std::fs::read_dir(file.parent().unwrap()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert_eq!(names, ["cfg-abc.token"]);
        // A token the user put there by hand is read as it is.
        std::fs::write(&file, "my-own.token+/==\n").unwrap();
        assert_eq!(load_or_create(&file).unwrap().expose(), "my-own.token+/==");
    }

    #[test]
    fn starts_racing_for_the_file_agree_on_one_token() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("t.token");
        let tokens: Vec<Token> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8).map(|_| s.spawn(|| load_or_create(&file).unwrap())).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(tokens.iter().all(|t| *t == tokens[0]));
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_file_others_may_read_is_refused_with_chmod_600() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("t.token");
        load_or_create(&file).unwrap();
        for bad in [0o644, 0o640, 0o604, 0o660, 0o602] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(bad)).unwrap();
            let e = format!("{:#}", load_or_create(&file).unwrap_err());
            assert!(e.contains(&format!("{} is open to other users (mode {bad:04o})", file.display())), "{e}");
            assert!(e.contains(&format!("run `chmod 600 {}`", file.display())), "{e}");
        }
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400)).unwrap();
        load_or_create(&file).unwrap();
    }

    #[test]
    fn a_file_of_someone_else_a_link_or_garbage_is_refused_naming_the_file() {
        let f = Path::new("/s/t.token");
        let e = check_file(f, true, 1001, 0o600, 1000).unwrap_err().to_string();
        assert!(e.contains("/s/t.token belongs to uid 1001, not to you (uid 1000)") && e.contains("delete it"), "{e}");
        let e = check_file(f, false, 1000, 0o600, 1000).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        check_file(f, true, 1000, 0o100600, 1000).unwrap();

        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::write(&real, "sy_x\n").unwrap();
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = tmp.path().join("t.token");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = format!("{:#}", load_or_create(&link).unwrap_err());
        assert!(e.contains("is a symbolic link"), "{e}");
        for garbage in ["", "\n", "two words\n", "é\n"] {
            std::fs::write(&real, garbage).unwrap();
            let e = format!("{:#}", load_or_create(&real).unwrap_err());
            assert!(e.contains(&format!("{} holds no usable token", real.display())), "{garbage:?}: {e}");
        }
    }

    #[test]
    fn the_user_s_own_token_wins_over_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("t.token");
        let own = HttpConfig { token: Some(config::HeaderValue::from("${T}".to_string())), ..HttpConfig::default() };
        let env = |n: &str| if n == "T" { Ok("from-env".to_string()) } else { no_env(n) };
        assert_eq!(for_daemon(Some(&own), &file, &env).unwrap().expose(), "from-env");
        assert!(!file.exists(), "no file is made when the config gives the token");
        assert!(
            format!("{:#}", for_daemon(Some(&own), &file, &no_env).unwrap_err()).contains("${T}, which is not set")
        );
        let generated = for_daemon(Some(&HttpConfig::default()), &file, &no_env).unwrap();
        assert_eq!(for_daemon(None, &file, &no_env).unwrap(), generated);
    }

    #[test]
    fn the_page_url_carries_the_token_in_its_fragment_and_reaches_every_interface_through_loopback() {
        let t = Token::new("sy_abc".into());
        assert_eq!(page_url("127.0.0.1:7070".parse().unwrap(), &t), "http://127.0.0.1:7070/#token=sy_abc");
        assert_eq!(page_url("0.0.0.0:80".parse().unwrap(), &t), "http://127.0.0.1:80/#token=sy_abc");
        assert_eq!(page_url("[::]:9".parse().unwrap(), &t), "http://[::1]:9/#token=sy_abc");
        assert_eq!(page_url("[::1]:9".parse().unwrap(), &t), "http://[::1]:9/#token=sy_abc");
        assert_eq!(page_url("10.1.2.3:9".parse().unwrap(), &t), "http://10.1.2.3:9/#token=sy_abc");
    }
}
