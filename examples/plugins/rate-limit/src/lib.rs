//! `rate-limit`: at most N calls a minute per client to the tools matching a glob.
//!
//! Config: `{"tools": {"<glob>": {"per_client_per_minute": N}}}`. The most specific glob that
//! matches a called tool applies, per server. A client is what switchyard knows of it: its
//! `clientInfo.name`, the project directory `connect` ran in, and over HTTP the name of the
//! named token it was served with (so people on different tokens never share a limit, and a
//! name alone cannot escape one); the clients that gave no name share one count (a client
//! cannot start afresh by connecting again). The counts live in the host (`host.take`), so
//! every instance of the plugin shares them; each client may use its N calls at once, then one
//! more every 60/N seconds. A call over the limit is refused naming the limit; the host adds
//! when the next call is allowed (it knows from `host.take`), in the tool result the model reads
//! and in the error. Built against `switchyard:policy@0.2.0`.

wit_bindgen::generate!({ path: "../../../wit/0.2", world: "policy" });

use std::cell::RefCell;

use plugin_util::{GlobMap, parse_config};
use switchyard::policy::host::{Level, log, take};

struct RateLimit;

/// One limit: the glob it was configured under, and its calls a minute.
struct Limit {
    glob: String,
    per_minute: u32,
}

thread_local! {
    // Filled by `init`; a component instance is single-threaded, so a RefCell is enough.
    static LIMITS: RefCell<GlobMap<Limit>> = RefCell::new(GlobMap::new());
}

impl Guest for RateLimit {
    fn init(config: String) -> Result<(), String> {
        let config = parse_config(&config)?;
        if let Some(k) = config.keys().find(|k| *k != "tools") {
            return Err(format!("unknown key `{k}` (rate-limit knows only `tools`)"));
        }
        let mut limits = GlobMap::new();
        if let Some(tools) = config.get("tools") {
            let tools = tools.as_object().ok_or("`tools` must be an object of glob -> limit")?;
            for (glob, v) in tools {
                let obj = v.as_object().ok_or_else(|| format!("tools.{glob} must be an object"))?;
                if let Some(k) = obj.keys().find(|k| *k != "per_client_per_minute") {
                    return Err(format!("tools.{glob}: unknown key `{k}` (the key is per_client_per_minute)"));
                }
                let per_minute = obj
                    .get("per_client_per_minute")
                    .and_then(|n| n.as_u64())
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        format!("tools.{glob}.per_client_per_minute must be a whole number from 1 to {}", u32::MAX)
                    })?;
                limits.insert(glob.clone(), Limit { glob: glob.clone(), per_minute });
            }
        }
        if limits.is_empty() {
            log(Level::Warn, "no `tools` configured: this plugin limits nothing");
        }
        LIMITS.with(|l| *l.borrow_mut() = limits);
        Ok(())
    }

    fn decide(call: Call, current: Decision) -> Verdict {
        let Some(tool) = call.tool.as_deref().filter(|_| call.method == "tools/call") else {
            return Verdict::Continue(current);
        };
        // A retry is the same call: it was counted on its first try.
        if call.attempt > 0 {
            return Verdict::Continue(current);
        }
        LIMITS.with(|l| {
            let limits = l.borrow();
            let Some(limit) = limits.get(tool) else { return Verdict::Continue(current) };
            let c = &call.client;
            let mut client = match &c.name {
                Some(name) => format!("client `{}`", name.escape_debug()),
                None => "the clients that gave no name".to_string(),
            };
            if let Some(token) = &c.token {
                client.push_str(&format!(" with token `{token}`"));
            }
            let key = format!("{}\n{}\n{client}\n{}", limit.glob, call.server, c.dir.as_deref().unwrap_or(""));
            match take(&key, limit.per_minute, limit.per_minute) {
                None => Verdict::Continue(current),
                // When the next call is allowed, the host adds: `take` told it.
                Some(_) => Verdict::Reject(format!(
                    "rate limit `{}` (at most {} call{} a minute per client) is used up for {client} on server `{}`",
                    limit.glob,
                    limit.per_minute,
                    if limit.per_minute == 1 { "" } else { "s" },
                    call.server,
                )),
            }
        })
    }

    fn list_tool(_tool: Tool, current: Listing) -> Listing {
        current
    }
}

export!(RateLimit);
