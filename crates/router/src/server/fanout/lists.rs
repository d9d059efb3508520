//! A server's list_changed notices (tools, prompts, resources): passed on only when the list
//! differs from what clients were shown.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Fanout;
use crate::upstream::Instance;

/// Puts a list's items in one order (by name, else URI), so that lists compare by content.
pub(crate) fn sort_list(items: &mut [serde_json::Value]) {
    items.sort_by_cached_key(|v| v.get("name").or_else(|| v.get("uri")).map(|k| k.to_string()));
}

/// The list kinds whose `notifications/<kind>/list_changed` is checked before clients hear of it.
pub(super) const LIST_KINDS: [&str; 3] = ["tools", "prompts", "resources"];

/// One kind's list_changed check: whether a check runs, and the newest notice behind it.
#[derive(Default)]
pub(super) struct ListWatch {
    running: bool,
    next: Option<(Arc<Instance>, String)>,
}

impl Fanout {
    /// `notifications/<kind>/list_changed` from an instance: clients hear of it only when the list
    /// differs from what they were shown (a starting instance registering its tools changes
    /// nothing). Notices during a check are coalesced: the newest one is checked next.
    pub(super) fn list_changed(self: &Arc<Self>, inst: &Arc<Instance>, kind: &'static str, line: String) {
        {
            let mut watch = self.list_watch.lock().expect("lock");
            let w = watch.entry(kind).or_default();
            w.next = Some((inst.clone(), line));
            if w.running {
                return;
            }
            w.running = true;
        }
        let hub = self.clone();
        tokio::spawn(async move {
            loop {
                let next = {
                    let mut watch = hub.list_watch.lock().expect("lock");
                    let w = watch.entry(kind).or_default();
                    match w.next.take() {
                        Some(n) => n,
                        None => {
                            w.running = false;
                            return;
                        }
                    }
                };
                hub.check_list(kind, next.0, next.1).await;
            }
        });
    }

    async fn check_list(&self, kind: &'static str, inst: Arc<Instance>, line: String) {
        let fetched = match self.owner.upgrade() {
            Some(server) => server.fetch_list(&inst, kind).await,
            None => return,
        };
        let (changed, items) = match fetched {
            // Unknown: better one notice too many than a client with a stale list.
            None => (true, None),
            Some(items) => {
                let mut lists = self.lists.lock().expect("lock");
                let changed = lists.get(kind) != Some(&items);
                if changed {
                    lists.insert(kind, items.clone());
                }
                (changed, Some(items))
            }
        };
        if changed {
            let owner = self.owner.upgrade();
            for s in self.audience(&inst) {
                // A tool list is told changed to a client only when the list it sees is.
                if kind == "tools"
                    && let (Some(owner), Some(items)) = (&owner, &items)
                    && !owner.tools_differ_for(&s, items).await
                {
                    self.absorbed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                s.send_from_server(line.clone());
            }
        } else {
            let n = self.absorbed.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::debug!(instance = %inst.label(), "{kind}/list_changed changed nothing clients were shown; not passed on ({n} so far)");
        }
    }

    /// Records a list as a client was just shown it.
    pub fn shown_list(&self, kind: &'static str, mut items: Vec<serde_json::Value>) {
        sort_list(&mut items);
        self.lists.lock().expect("lock").insert(kind, items);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_compare_by_content_not_order() {
        let mut x = vec![serde_json::json!({"name": "b", "d": 1}), serde_json::json!({"name": "a"})];
        let mut y = vec![serde_json::json!({"name": "a"}), serde_json::json!({"d": 1, "name": "b"})];
        sort_list(&mut x);
        sort_list(&mut y);
        assert_eq!(x, y);
        let mut r = vec![serde_json::json!({"uri": "z://2"}), serde_json::json!({"uri": "z://1"})];
        sort_list(&mut r);
        assert_eq!(r[0]["uri"], "z://1");
    }
}
