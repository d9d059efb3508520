//! The daemon's HTTP front beside server-everything's own Streamable HTTP transport.

use super::*;

// ------------------------------------------------------------------------------------------------
// The daemon's HTTP front: server-everything behind the front (over stdio) against
// server-everything's own Streamable HTTP transport, reached by the same bare HTTP client.

/// Sessions opened and ended (initialize, initialized, DELETE) per measurement of sessions/s.
pub(crate) const HTTP_SESSIONS: usize = 300;
/// Idle sessions held open for the memory measurement.
pub(crate) const IDLE_SESSIONS: usize = 1000;

impl Bench {
    pub(crate) fn http(&self) {
        let Some(entry) = self.everything_entry() else {
            println!("\n(http: server-everything not installed: run `npm ci --ignore-scripts` in tests/npm)");
            return;
        };
        let ev = self.everything_argv().expect("entry exists");
        let config = format!(
            "{}{}[http]\nlisten = \"127.0.0.1:0\"\nmax_sessions = {}\n",
            server_table("everything", &ev),
            server_table("fixture", &self.fixture_argv()),
            IDLE_SESSIONS * 3
        );
        let home = DaemonHome::new(&self.exe, self.dir.join("http"), &config);
        home.cli(&["daemon", "--detach"]);
        let status = home.status();
        let daemon = status["pid"].as_u64().unwrap() as u32;
        let base = format!("http://{}", status["http"]["listen"].as_str().expect("the daemon serves HTTP"));
        let token = home.cli(&["token"]).trim().to_string();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let bare = http_client();
        let front = http_client_with_token(&token);
        let own = HttpServer::everything(&entry, &self.dir);

        let mut direct = Direct::open("server-everything's own Streamable HTTP", &rt, &bare, &own.url(), "message");
        let mut routed = Direct::open(
            "the front, server-everything over stdio behind it",
            &rt,
            &front,
            &format!("{base}/mcp/everything"),
            "message",
        );
        let mut floor = Direct::open(
            "the front, switchyard's fixture behind it",
            &rt,
            &front,
            &format!("{base}/mcp/fixture"),
            "text",
        );
        println!(
            "\n### HTTP front, `echo` over Streamable HTTP ({ROUNDS} alternating rounds; sequential calls, one session each)\n"
        );
        let mut targets = [(&mut direct, REMOTE_BLOCK), (&mut routed, REMOTE_BLOCK), (&mut floor, REMOTE_BLOCK)];
        latency_table(&mut targets);

        let (mut d, mut r) = (Vec::new(), Vec::new());
        for _ in 0..REMOTE_RATE_ROUNDS {
            d.push(direct_rate(&rt, &direct.s, "message", 64));
            r.push(direct_rate(&rt, &routed.s, "message", 64));
        }
        println!(
            "\n### HTTP front, throughput with 64 calls outstanding on one session ({REMOTE_RATE_ROUNDS} alternating rounds of {} s)\n",
            MEASURE.as_secs_f64()
        );
        println!("| server-everything's own HTTP, calls/s | through the front, calls/s | ratio of medians |");
        println!("|---:|---:|---:|");
        let show = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" / ");
        println!("| {} | {} | {:.2}× |", show(&d), show(&r), median_f(&r) / median_f(&d));

        // Sessions per second: initialize + initialized + DELETE, one after the other.
        let churn = |client: &reqwest::Client, url: &str| -> f64 {
            rt.block_on(async {
                let t = Instant::now();
                for _ in 0..HTTP_SESSIONS {
                    let s = HttpSession::open(client, url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
                    s.delete().await;
                }
                HTTP_SESSIONS as f64 / t.elapsed().as_secs_f64()
            })
        };
        let (mut d, mut r) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            d.push(churn(&bare, &own.url()));
            r.push(churn(&front, &format!("{base}/mcp/everything")));
        }
        println!(
            "\n### HTTP front, sessions per second (initialize, initialized, DELETE; {HTTP_SESSIONS} in a row, 3 alternating rounds)\n"
        );
        println!("| server-everything's own HTTP | through the front | ratio of medians |");
        println!("|---:|---:|---:|");
        println!("| {} | {} | {:.2}× |", show(&d), show(&r), median_f(&r) / median_f(&d));

        // Memory: IDLE_SESSIONS sessions opened (one call each) and left idle, on each side; a
        // server-everything of its own, so that nothing of the rounds above is in its figure.
        drop(own);
        let own = HttpServer::everything(&entry, &self.dir);
        let own_pid = own.child.as_ref().expect("runs").id();
        let hold = |client: &reqwest::Client, url: &str, pid: u32| -> (u64, u64) {
            rt.block_on(async {
                let before = rss_kib(pid);
                let mut held = Vec::with_capacity(IDLE_SESSIONS);
                for _ in 0..IDLE_SESSIONS {
                    let s = HttpSession::open(client, url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
                    let id = DIRECT_IDS.fetch_add(1, Ordering::Relaxed);
                    s.post(echo_request(id, "message"), Some(id)).await.unwrap();
                    held.push(s);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                let with = rss_kib(pid);
                for s in held {
                    s.delete().await;
                }
                (before, with)
            })
        };
        let (own_before, own_with) = hold(&bare, &own.url(), own_pid);
        let (front_before, front_with) = hold(&front, &format!("{base}/mcp/everything"), daemon);
        println!("\n### HTTP front, memory of {IDLE_SESSIONS} idle sessions (one call each, then idle)\n");
        println!("| process | RSS before | RSS with them | per idle session |");
        println!("|---|---:|---:|---:|");
        let per = |a: u64, b: u64| format!("{:.1} KiB", b.saturating_sub(a) as f64 / IDLE_SESSIONS as f64);
        println!(
            "| server-everything (its own HTTP) | {} | {} | {} |",
            mib(own_before),
            mib(own_with),
            per(own_before, own_with)
        );
        println!(
            "| switchyard daemon (the front; server-everything behind it is one process for all) | {} | {} | {} |",
            mib(front_before),
            mib(front_with),
            per(front_before, front_with)
        );
        drop(home);
    }
}

/// The bare client's HTTP client, sending the front's bearer token on every request.
pub(crate) fn http_client_with_token(token: &str) -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut headers = reqwest::header::HeaderMap::new();
    let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")).unwrap();
    value.set_sensitive(true);
    headers.insert(reqwest::header::AUTHORIZATION, value);
    reqwest::Client::builder().default_headers(headers).build().unwrap()
}
