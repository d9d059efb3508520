//! Upkeep of running instances: idle reaping, health pings, and what happens when one dies.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;

use super::Server;
use crate::upstream::Instance;
use switchyard_core::error::CallError;

impl Server {
    pub(super) async fn on_death(self: Arc<Self>, inst: Arc<Instance>) {
        self.hub.instance_gone(&inst);
        let Some(pool) = self.pool_of(&inst).cloned() else { return };
        pool.forget(&inst);
        if inst.is_closing() || self.shutdown.is_cancelled() {
            return;
        }
        let death = inst.death().cloned();
        self.counts.unexpected_ends.fetch_add(1, Ordering::Relaxed);
        let status = death.as_ref().map_or("", |d| d.status.as_str());
        self.metrics.instance_died(&self.name, &inst.pool(), status);
        if let Some(d) = &death {
            self.note_error(format!("{} ended: {}", d.instance, d.status));
        }
        if !inst.has_answered() {
            let status = death.map(|d| d.status).unwrap_or_default();
            self.record_start_failure(format!("{} {status} before answering any call", inst.label()));
        }
        // Back to `min`, with the start backoff applied inside start_instance. First: moving the
        // subscriptions below may wait behind a long call on another instance.
        if pool.missing() > 0 {
            let p = pool.clone();
            let server = self.clone();
            self.tasks.spawn(async move {
                match p.warm_up().await {
                    Ok(()) => server.metrics.instance_restarted(&server.name, &p.name),
                    Err(e) => tracing::warn!("pool `{}`: respawn failed: {e}", p.name),
                }
            });
        }
        if !inst.applied().uris.is_empty() {
            // It held the subscriptions: another shared instance takes them over.
            self.reconcile(Duration::from_millis(self.limits.call_timeout_ms)).await;
        }
    }

    /// Background upkeep: reap idle instances, ping idle ones and recycle those that do not answer.
    pub async fn maintain(self: Arc<Self>) {
        let interval = Duration::from_millis(self.limits.health_interval_ms.clamp(100, 1000));
        let mut pinging: BTreeSet<u64> = BTreeSet::new();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<u64>();
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = tokio::time::sleep(interval) => {}
            }
            while let Ok(n) = done_rx.try_recv() {
                pinging.remove(&n);
            }
            for pool in self.every_pool() {
                for inst in pool.take_idle() {
                    tracing::info!(instance = %inst.label(), "idle past idle_timeout_ms; shutting it down");
                    self.tasks.spawn(async move { inst.shutdown().await });
                }
            }
            if self.limits.health_interval_ms == 0 {
                continue;
            }
            let every = Duration::from_millis(self.limits.health_interval_ms);
            for inst in self.all_instances() {
                if inst.is_ready()
                    && inst.inflight() == 0
                    && inst.idle_for() >= every
                    && !pinging.contains(&inst.number())
                {
                    pinging.insert(inst.number());
                    let (server, done) = (self.clone(), done_tx.clone());
                    self.tasks.spawn(async move {
                        server.health_check(&inst).await;
                        let _ = done.send(inst.number());
                    });
                }
            }
        }
    }

    /// Pings an instance; one that does not answer in time is killed (and respawned to `min`).
    pub async fn health_check(&self, inst: &Arc<Instance>) {
        let timeout = Duration::from_millis(self.limits.health_timeout_ms);
        // The 2026-07-28 protocol has no ping: its instances are probed with server/discover.
        let probe = match self.is_modern(inst) {
            true => self.own_request(inst, "server/discover", &self.modern_envelope(), timeout, "health probe").await,
            false => self.own_request(inst, "ping", "{}", timeout, "health ping").await,
        };
        match probe {
            Ok(_) => inst.touch(),
            Err(CallError::Timeout { .. }) => {
                tracing::warn!(
                    instance = %inst.label(),
                    "did not answer a health ping within {} ms; recycling it",
                    timeout.as_millis()
                );
                if let Some(pool) = self.pool_of(inst) {
                    pool.forget(inst);
                }
                inst.kill_because(format!(
                    "recycled: it did not answer a health ping within {} ms",
                    timeout.as_millis()
                ))
                .await;
                if let Some(pool) = self.pool_of(inst).cloned()
                    && pool.missing() > 0
                {
                    let _ = pool.warm_up().await;
                }
            }
            Err(_) => {}
        }
    }
}
