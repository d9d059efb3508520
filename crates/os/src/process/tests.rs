use super::*;

/// A shell that starts a grandchild and prints its pid; the test ends the tree through [`Tree`].
#[cfg(unix)]
#[tokio::test]
async fn stopping_the_tree_ends_the_grandchild_too() {
    use tokio::io::AsyncBufReadExt;
    let mut cmd = tokio::process::Command::new("sh");
    cmd.args(["-c", "sleep 30 & echo $!; wait"]).stdout(std::process::Stdio::piped()).kill_on_drop(true);
    prepare(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let tree = adopt(&child).unwrap();
    let mut line = String::new();
    tokio::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).await.unwrap();
    let grandchild: u32 = line.trim().parse().unwrap();
    assert!(running(grandchild));
    assert_eq!(first_child(child.id().unwrap()), Some(grandchild));
    tree.stop(Stop::Kill);
    let status = child.wait().await.unwrap();
    assert_eq!(describe_exit(status), "killed by signal 9");
    // The grandchild was reparented and reaped by init, or is a zombie of ours: gone either way.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while running(grandchild) {
        assert!(std::time::Instant::now() < deadline, "the grandchild {grandchild} outlived its tree");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[cfg(windows)]
#[tokio::test]
async fn stopping_the_tree_ends_the_child_and_what_it_started() {
    // cmd runs a second cmd that waits: both are in the job.
    let mut cmd = tokio::process::Command::new("cmd.exe");
    cmd.args(["/d", "/c", "cmd.exe /d /c ping -n 30 127.0.0.1 >NUL"]).kill_on_drop(true);
    prepare(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let tree = adopt(&child).unwrap();
    let pid = child.id().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let grandchild = loop {
        if let Some(g) = first_child(pid) {
            break g;
        }
        assert!(std::time::Instant::now() < deadline, "the child started nothing");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(running(grandchild));
    tree.stop(Stop::Kill);
    child.wait().await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running(grandchild) {
        assert!(std::time::Instant::now() < deadline, "the grandchild {grandchild} outlived its job");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[test]
fn this_process_runs_and_an_unused_pid_does_not() {
    assert!(running(std::process::id()));
    assert!(!running(u32::MAX - 7));
}

#[cfg(unix)]
#[test]
fn the_parent_watch_sees_a_parent_exit() {
    // Watch a child of ours as if it were a parent: it is not our parent, so `wait` returns at
    // once through the fallback after its exit event; what matters is that it returns.
    let mut child = std::process::Command::new("sleep").arg("0.2").spawn().unwrap();
    let watch = ParentWatch::open(child.id()).unwrap();
    assert!(!watch.is_parent());
    let started = std::time::Instant::now();
    watch.wait();
    child.wait().unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}
