//! The templates of a router (servers with `client_env`) and their variants, one per distinct set of client values.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::anyhow;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Servers, start_upkeep, stop_server};
use crate::server::Server;
use crate::upstream::Connector;
use crate::upstream::transport::{BoxFuture, Failure};
use switchyard_config::Config;

/// How long a variant of a template goes on running after its last session has gone: a client
/// that comes back (a restarted chat, a `connect` killed and started again) finds its server
/// and that server's state still there.
pub const VARIANT_IDLE: Duration = Duration::from_secs(600);
/// How often a variant checks whether it has been idle that long.
const VARIANT_CHECK: Duration = Duration::from_secs(1);
/// Client values shorter than this are not blanked out of error texts (see [`redact`]): doing
/// so would garble the text, and so short a value is no secret.
const REDACT_MIN: usize = 4;

/// A server with `client_env`: its config as written, and the servers made from it for the
/// clients' values (variants), made when a client with a new set of values joins.
pub(super) struct Template {
    pub(super) name: String,
    /// The single-server config, `${NAME}` of client names not yet replaced.
    pub(super) config: Config,
    /// What it fronts, as written (never with a client's value).
    pub(super) shown: String,
    pub(super) variants: Mutex<Vec<Arc<Variant>>>,
    /// The number of the next variant (`NAME@N`).
    next: AtomicU64,
    /// Fires when the template leaves the router (changed, removed): its variants' upkeep ends.
    gone: CancellationToken,
}

/// One server of a template, for one set of client values.
pub(super) struct Variant {
    /// `NAME@N`: how status names it (never by its values, nor a hash of them).
    pub(super) label: String,
    values: BTreeMap<String, String>,
    server: Arc<Server>,
    /// When a client was last sent to it, or last seen on it.
    used: Mutex<Instant>,
}

/// How status shows a server that is a variant: its label, what its template fronts, and the
/// values to blank out of what its instances report.
#[derive(Clone)]
pub(super) struct Shown {
    pub(super) label: String,
    pub(super) template: String,
    pub(super) target: String,
    pub(super) values: BTreeMap<String, String>,
}

impl Variant {
    fn shown(&self, template: &Template) -> Shown {
        Shown {
            label: self.label.clone(),
            template: template.name.clone(),
            target: template.shown.clone(),
            values: self.values.clone(),
        }
    }
}

/// `text` with every client value (of at least [`REDACT_MIN`] bytes) replaced by `${NAME}`.
pub(super) fn redact(text: &str, values: &BTreeMap<String, String>) -> String {
    let mut out = text.to_string();
    for (name, value) in values.iter().filter(|(_, v)| v.len() >= REDACT_MIN) {
        out = out.replace(value.as_str(), &format!("${{{name}}}"));
    }
    out
}

/// The connector of a variant: what it says of itself and of a failed start (which reaches
/// clients and status) has the client's values blanked out, as `${NAME}`.
pub(super) struct Redacting {
    pub(super) inner: Arc<dyn Connector>,
    pub(super) values: BTreeMap<String, String>,
    /// Log a failed start (the stdio connector, told not to, would have).
    pub(super) log: bool,
}

impl Connector for Redacting {
    fn connect(
        &self,
        label: &str,
        inbound: Arc<dyn crate::upstream::Inbound>,
    ) -> BoxFuture<'static, Result<Arc<dyn crate::upstream::Transport>, Failure>> {
        let started = self.inner.connect(label, inbound);
        let (values, label, log) = (self.values.clone(), label.to_string(), self.log);
        Box::pin(async move {
            started.await.map_err(|f| {
                let reason = redact(&f.reason, &values);
                if log {
                    tracing::error!(instance = %label, "{reason}");
                }
                Failure { reason, ..f }
            })
        })
    }

    fn describe(&self) -> String {
        redact(&self.inner.describe(), &self.values)
    }

    fn hint(&self) -> String {
        redact(&self.inner.hint(), &self.values)
    }
}

impl Servers {
    /// Serves the template `config` (a single-server config with `client_env`) under its name
    /// from now on: each client gets the variant for its values. What was there under that name
    /// is retired, as by [`Servers::add`]. Fails (nothing changes) when the template cannot work
    /// whatever the client sends: a header's `${VAR}` of the daemon's environment not set, say.
    pub fn add_template(self: &Arc<Self>, config: &Config, why: &str) -> anyhow::Result<()> {
        let s = &config.server;
        let name = s.name.clone().unwrap_or_default();
        for (header, value) in &s.launch.headers {
            let env = |var: &str| {
                if s.launch.client_env.iter().any(|n| n == var) { Ok(String::new()) } else { std::env::var(var) }
            };
            switchyard_config::expand(&value.raw, &env).map_err(|e| {
                anyhow!("server `{name}`: {} {e}", switchyard_config::about_header(header, &value.source))
            })?;
        }
        let shown = match (&s.launch.command, &s.launch.url) {
            (Some(command), _) => std::iter::once(command).chain(&s.launch.args).cloned().collect::<Vec<_>>().join(" "),
            (None, Some(url)) => match switchyard_config::parse_url(url) {
                Ok(u) => switchyard_config::display_url(&u),
                // `${NAME}` in the host: as written, up to any query (which may hold a key).
                Err(_) => url.split(['?', '#']).next().unwrap_or_default().to_string(),
            },
            (None, None) => String::new(),
        };
        let template = Arc::new(Template {
            name: name.clone(),
            config: config.clone(),
            shown,
            variants: Mutex::new(Vec::new()),
            next: AtomicU64::new(1),
            gone: self.shutdown.child_token(),
        });
        self.broken.write().expect("lock").remove(&name);
        let server = self.servers.write().expect("lock").remove(&name);
        let old = self.templates.write().expect("lock").insert(name, template);
        if let Some(old) = server {
            self.retire(old, why, true, None);
        }
        if let Some(t) = old {
            self.retire_template(&t, why, true);
        }
        Ok(())
    }

    /// A template leaves: each of its variants is retired as a server is (see [`Servers::retire`]).
    pub(super) fn retire_template(self: &Arc<Self>, template: &Template, why: &str, replaced: bool) {
        template.gone.cancel();
        let variants = std::mem::take(&mut *template.variants.lock().expect("lock"));
        for v in variants {
            self.retire(v.server.clone(), why, replaced, Some(v.shown(template)));
        }
    }

    /// The variant of `template` for a client that sent `env`: the one serving these values, or
    /// a new one. Names of `env` the template does not take are ignored. None: the template
    /// left the router meanwhile (look it up again).
    pub(super) fn variant(
        self: &Arc<Self>,
        template: &Arc<Template>,
        env: &BTreeMap<String, String>,
    ) -> Result<Option<Arc<Server>>, String> {
        let names = &template.config.server.launch.client_env;
        let values: BTreeMap<String, String> =
            names.iter().filter_map(|n| env.get(n).map(|v| (n.clone(), v.clone()))).collect();
        let mut variants = template.variants.lock().expect("lock");
        // Checked under the lock `retire_template` takes after cancelling: a variant made here
        // is either seen and retired there, or never made.
        if template.gone.is_cancelled() {
            return Ok(None);
        }
        if let Some(v) = variants.iter().find(|v| v.values == values) {
            *v.used.lock().expect("lock") = Instant::now();
            return Ok(Some(v.server.clone()));
        }
        // The error texts come from code that saw the values: blanked out, to be safe.
        let concrete = template.config.for_client(&values).map_err(|e| redact(&format!("{e:#}"), &values))?;
        let server =
            self.build(&concrete).map_err(|e| redact(&format!("server `{}`: {e:#}", template.name), &values))?;
        let label = format!("{}@{}", template.name, template.next.fetch_add(1, Ordering::Relaxed));
        // Its instances say which variant they belong to (`NAME@2#1`) in logs and status.
        server.set_instance_prefix(&label);
        start_upkeep(&server);
        let variant = Arc::new(Variant { label, values, server: server.clone(), used: Mutex::new(Instant::now()) });
        variants.push(variant.clone());
        drop(variants);
        tracing::info!(
            server = %template.name,
            "{} started: a client's values of {} differ from those of every running variant",
            variant.label,
            names.join(", ")
        );
        tokio::spawn(self.clone().expire(template.clone(), variant));
        Ok(Some(server))
    }

    /// Stops `variant` once it has had no session for [`VARIANT_IDLE`]; ends early when the
    /// template leaves (retiring the variant then is [`Servers::retire_template`]'s).
    async fn expire(self: Arc<Self>, template: Arc<Template>, variant: Arc<Variant>) {
        loop {
            tokio::select! {
                _ = template.gone.cancelled() => return,
                _ = variant.server.shutdown.cancelled() => return,
                _ = tokio::time::sleep(VARIANT_CHECK) => {}
            }
            if variant.server.hub.session_count() > 0 {
                *variant.used.lock().expect("lock") = Instant::now();
                continue;
            }
            // Under the lock a client finding this variant takes, so none is sent to it now.
            let mut variants = template.variants.lock().expect("lock");
            if variant.used.lock().expect("lock").elapsed() < VARIANT_IDLE || variant.server.hub.session_count() > 0 {
                continue;
            }
            variants.retain(|v| !Arc::ptr_eq(v, &variant));
            break;
        }
        tracing::info!(
            server = %template.name,
            "{}: no session for {} s; its instances stop",
            variant.label,
            VARIANT_IDLE.as_secs()
        );
        stop_server(&variant.server).await;
    }

    /// The variants of every template, with how status shows each.
    pub(super) fn variants(&self) -> Vec<(Arc<Server>, Shown)> {
        let templates: Vec<Arc<Template>> = self.templates.read().expect("lock").values().cloned().collect();
        let mut out = Vec::new();
        for t in templates {
            out.extend(t.variants.lock().expect("lock").iter().map(|v| (v.server.clone(), v.shown(&t))));
        }
        out
    }
}
