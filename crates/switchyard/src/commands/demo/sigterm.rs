//! Scenario 6: a client SIGTERMs its server command (what Claude Code does to healthy stdio
//! servers, and to one whose `initialize` takes too long). Directly the server dies with its
//! state and the next client waits for a new start; through `switchyard connect` the server lives
//! on in the daemon, and the next client is answered at once, even by a daemon started anew (it
//! remembers the server's `initialize`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::Demo;
use super::peer::Peer;
use super::report::{Report, secs};
use super::scenarios::fixture_pid;

/// How long the fixture takes to start: slow enough that a client would notice.
const START_MS: &str = "2000";

impl Demo {
    pub(super) async fn sigterm(&self, report: &mut Report, name: &str) -> anyhow::Result<()> {
        let fixture: Vec<String> = ["fixture", "--init-delay-ms", START_MS].map(String::from).to_vec();

        // Directly: the client's child; a SIGTERM ends it and what it held.
        let (d_pid, d_again, d_pid_after) = self.sigterm_then_next("fixture", &fixture, &[]).await?;
        println!(
            "      directly: the next client waited {} for initialize (a new server, pid {d_pid_after})",
            secs(d_again)
        );

        // Through connect: the daemon owns the server; its state is in this scratch directory.
        let dir = self.scratch.0.join(name.replace(' ', "-"));
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("switchyard.toml");
        let exe = self.exe.to_string_lossy().into_owned();
        let mut text = format!("[servers.slow]\ncommand = {}\nargs = [", toml_str(&exe));
        text.push_str(&fixture.iter().map(|a| toml_str(a)).collect::<Vec<_>>().join(", "));
        text.push_str("]\n");
        std::fs::write(&config, text)?;
        let state = dir.join("state").display().to_string();
        let envs = [("XDG_STATE_HOME", state.as_str())];
        let connect: Vec<String> =
            ["connect", "slow", "--config", &config.display().to_string()].map(String::from).to_vec();

        let (s_pid, s_again, s_pid_after) = self.sigterm_then_next("connect", &connect, &envs).await?;
        println!(
            "      through switchyard: the next client waited {} (the same server, pid {s_pid_after})",
            secs(s_again)
        );

        // The daemon itself stops; a new one answers from what the server said last time.
        stop_daemon(&self.exe, &config, &envs).await?;
        let c3 = Peer::spawn_env("connect", &self.exe, &connect, &envs)?;
        let t = Instant::now();
        c3.initialize().await?;
        let s_cached = t.elapsed();
        let t = Instant::now();
        let s_pid_new = fixture_pid(&c3).await?;
        let first_call = t.elapsed();
        c3.shutdown().await;
        stop_daemon(&self.exe, &config, &envs).await?;
        println!(
            "      after the daemon restarted: initialize in {}, its first call {} (the server's start)",
            secs(s_cached),
            secs(first_call)
        );

        report.check(d_pid_after != d_pid, || format!("{name}: directly the server survived its SIGTERM"));
        report.check(s_pid_after == s_pid, || {
            format!("{name}: through switchyard the server was replaced ({s_pid} -> {s_pid_after})")
        });
        let fast = Duration::from_millis(1000);
        report.check(s_again < fast, || format!("{name}: the next client waited {}", secs(s_again)));
        report.check(s_cached < fast && s_pid_new != s_pid, || {
            format!("{name}: a new daemon answered initialize after {} (pid {s_pid_new})", secs(s_cached))
        });
        report.row(name, "server after the client's SIGTERM", "dies, with its state", "lives on (same pid)");
        report.row("", "next client's initialize", secs(d_again), secs(s_again));
        report.row("", "initialize from a new daemon", "-", format!("{} (remembered)", secs(s_cached)));
        Ok(())
    }
}

impl Demo {
    /// A client starts `args` and SIGTERMs it; the next client starts it again. Returns the
    /// server's pid for the first, how long the next waited for initialize, and its pid for it.
    async fn sigterm_then_next(
        &self,
        label: &'static str,
        args: &[String],
        envs: &[(&str, &str)],
    ) -> anyhow::Result<(u32, Duration, u32)> {
        let first = Peer::spawn_env(label, &self.exe, args, envs)?;
        first.initialize().await?;
        let before = fixture_pid(&first).await?;
        first.terminate();
        first.shutdown().await;
        let next = Peer::spawn_env(label, &self.exe, args, envs)?;
        let t = Instant::now();
        next.initialize().await?;
        let waited = t.elapsed();
        let after = fixture_pid(&next).await?;
        next.shutdown().await;
        Ok((before, waited, after))
    }
}

/// `switchyard stop --config CONFIG` (the daemon stops its servers and exits).
async fn stop_daemon(exe: &Path, config: &Path, envs: &[(&str, &str)]) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(exe)
        .args(["stop", "--config"])
        .arg(config)
        .envs(envs.iter().copied())
        .output()
        .await
        .context("cannot run switchyard stop")?;
    anyhow::ensure!(out.status.success(), "switchyard stop failed: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// `s` as a TOML string.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}
