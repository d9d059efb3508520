use super::*;

#[test]
fn a_socket_path_too_long_for_the_os_uses_the_short_name() {
    let runtime = std::path::Path::new("/tmp/switchyard-501");
    let key = "switchyard-0123456789ab";
    if cfg!(windows) {
        let p = path_for(runtime, key, "0123").to_string_lossy().into_owned();
        assert!(p.starts_with(r"\\.\pipe\switchyard-") && p.ends_with(key), "{p}");
        return;
    }
    assert_eq!(path_for(runtime, key, "0123"), runtime.join(format!("{key}.sock")));
    let deep = std::path::PathBuf::from(format!("/{}", "d".repeat(90)));
    let p = path_for(&deep, key, "0123");
    assert_eq!(p, deep.join("0123.sock"));
    assert!(p.as_os_str().len() <= SOCKET_PATH_MAX);
}

/// One line there and back over the real endpoint of this OS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_gets_its_answer_over_the_endpoint() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let path = path_for(dir.path(), &format!("test-{}", std::process::id()), "t");
    #[cfg(unix)]
    let server = {
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        tokio::spawn(async move {
            let (s, _) = listener.accept().await.unwrap();
            let (r, mut w) = s.into_split();
            let mut line = String::new();
            tokio::io::BufReader::new(r).read_line(&mut line).await.unwrap();
            w.write_all(format!("you said {line}").as_bytes()).await.unwrap();
        })
    };
    #[cfg(windows)]
    let server = {
        let mut listener = Listener::bind(&path).unwrap();
        // A second daemon on the same name is refused (Wine does not enforce
        // FILE_FLAG_FIRST_PIPE_INSTANCE; docs/platforms.md lists what Wine cannot show).
        if !crate::win::under_wine() {
            assert!(Listener::bind(&path).is_err());
        }
        tokio::spawn(async move {
            let s = listener.accept().await.unwrap();
            let (r, mut w) = tokio::io::split(s);
            let mut line = String::new();
            tokio::io::BufReader::new(r).read_line(&mut line).await.unwrap();
            w.write_all(format!("you said {line}").as_bytes()).await.unwrap();
        })
    };
    let p = path.clone();
    let answer = tokio::task::spawn_blocking(move || request(&p, b"hello\n", std::time::Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer, "you said hello\n");
    server.await.unwrap();
}

#[tokio::test]
async fn nobody_listening_is_not_found_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = connect(&path_for(dir.path(), &format!("absent-{}", std::process::id()), "a")).await.unwrap_err();
    assert!(matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused), "{e:?}");
}
