// The status page: reads the token from the address's fragment (#token=..., which never reaches
// a server), keeps it for this tab, and polls /api/status with it every 2 s. Data is put in the
// page as text only.
"use strict";
(function () {
  var KEY = "switchyard-token";
  var EVERY_MS = 2000;
  var token = null;
  var found = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (found) {
    token = decodeURIComponent(found[1]);
    try { sessionStorage.setItem(KEY, token); } catch (e) { /* storage off: this load only */ }
    history.replaceState(null, "", location.pathname + location.search);
  } else {
    try { token = sessionStorage.getItem(KEY); } catch (e) { token = null; }
  }

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function ms(v) {
    v = v || 0;
    if (v < 1000) { return v + " ms"; }
    if (v < 60000) { return (v / 1000).toFixed(1) + " s"; }
    if (v < 3600000) { return Math.floor(v / 60000) + " min"; }
    return (v / 3600000).toFixed(1) + " h";
  }

  // A remote server whose sign-in needs a person: what to do, in its state column.
  function signInTrouble(v) {
    var si = v.sign_in;
    if (!si || si.state === "signed_in" || si.state === "expired") { return null; }
    var login = "switchyard login " + v.name;
    if (si.state === "not_signed_in") { return { cls: "warn", text: "not signed in: " + login }; }
    if (si.state === "expired_for_good") { return { cls: "warn", text: "the token has expired: " + login }; }
    return { cls: "bad", text: (si.error || "the sign-in is failing") + ": " + login };
  }

  function fill(id, rows, columns) {
    var body = $(id).tBodies[0];
    var fresh = document.createElement("tbody");
    rows.forEach(function (row) {
      var tr = el("tr");
      row.forEach(function (cell) {
        var td = typeof cell === "object" && cell !== null ? el("td", cell.cls, cell.text) : el("td", null, cell);
        tr.appendChild(td);
      });
      fresh.appendChild(tr);
    });
    if (rows.length === 0) {
      var tr = el("tr");
      var td = el("td", "empty", "none");
      td.colSpan = columns;
      tr.appendChild(td);
      fresh.appendChild(tr);
    }
    body.parentNode.replaceChild(fresh, body);
  }
  function num(v) { return { cls: "num", text: v === undefined || v === null ? "" : v }; }
  function notice(text) {
    var n = $("notice");
    n.hidden = !text;
    n.textContent = text || "";
  }

  function render(s) {
    var servers = (s.servers || []).concat((s.retired || []).map(function (r) { r.retired = true; return r; }));
    var instances = [];
    var sessions = [];
    var calls = [];
    fill("servers", servers.map(function (v) {
      var inflight = 0;
      (v.instances || []).forEach(function (i) {
        inflight += i.inflight || 0;
        // An instance of one session's, client's or key's own says whose (`default, client cursor`).
        var pool = i.scope && i.scope !== "shared" ? i.pool + ", " + i.scope : i.pool;
        instances.push([i.label, pool, i.pid ? "pid " + i.pid : (i.url || ""),
          i.ready ? { cls: "ok", text: "ready" } : { cls: "warn", text: "starting" }, num(i.inflight), ms(i.uptime_ms)]);
      });
      (v.calls || []).forEach(function (c) {
        var silent = c.silent_ms === null || c.silent_ms === undefined ? "" : ms(c.silent_ms);
        var quiet = c.silent_ms >= 10000 ? { cls: "warn", text: silent } : silent;
        var p = c.progress;
        var state = !p ? c.state : c.state + "; progress " + p.progress + (p.total === null ? "" : "/" + p.total) +
          (p.message ? " (" + p.message + ")" : "") + " " + ms(p.age_ms) + " ago";
        calls.push([{ cls: "mono", text: c.call }, v.name, c.session, ms(c.age_ms), state, c.instance || "", quiet]);
      });
      (v.sessions || []).forEach(function (c) {
        sessions.push([c.label, v.name, c.transport, c.client || "(not initialised yet)",
          num(c.inflight), num(c.waiting), ms(c.uptime_ms)]);
      });
      var state;
      if (v.client_env) { state = { cls: "", text: "template: " + (v.variants || []).length + " running" }; }
      else if (v.retired) { state = { cls: "warn", text: "old configuration, draining" }; }
      else if (v.one_at_a_time) { state = { cls: "warn", text: v.one_at_a_time }; }
      else if (signInTrouble(v)) { state = signInTrouble(v); }
      else if (v.initialized) { state = { cls: "ok", text: v.sibling_of ? "serving clients that differ from " + v.sibling_of + "'s" : "serving" }; }
      else { state = { cls: "", text: "waiting for its first client" }; }
      return [v.name, { cls: "mono", text: v.target }, state, num(v.starts), num(v.restarts), num(inflight),
        v.last_error ? { cls: "bad", text: v.last_error } : ""];
    }).concat((s.broken || []).map(function (b) {
      return [b.name, "", { cls: "bad", text: "cannot be used" }, "", "", "", { cls: "bad", text: b.error }];
    })), 7);
    fill("instances", instances, 6);
    fill("calls", calls, 7);
    fill("sessions", sessions, 7);

    var plugins = $("plugins");
    plugins.textContent = "";
    (s.plugins || []).forEach(function (p) { plugins.appendChild(el("li", "mono", p)); });
    if ((s.plugins || []).length === 0) { plugins.appendChild(el("li", "empty", "none: every call is forwarded as the server declares it")); }

    var errors = $("errors");
    errors.textContent = "";
    (s.recent_errors || []).slice().reverse().forEach(function (r) {
      var when = new Date(r.at_ms).toLocaleTimeString();
      errors.appendChild(el("li", r.level === "ERROR" ? "bad" : "warn", when + " " + r.level + " " + r.message));
    });
    if ((s.recent_errors || []).length === 0) { errors.appendChild(el("li", "empty", "none")); }

    var http = s.http ? " · HTTP " + s.http.listen + " (" + s.http.sessions + " sessions)" : "";
    $("summary").textContent = "v" + s.version + " · pid " + s.pid + " · up " + ms(s.uptime_ms) + http;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }

  function poll() {
    if (!token) {
      document.body.dataset.state = "no-token";
      notice("This page needs the daemon's token: run `switchyard token --url` and open the address it prints.");
      return;
    }
    fetch("/api/status", { headers: { Authorization: "Bearer " + token }, cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) {
          try { sessionStorage.removeItem(KEY); } catch (e) { /* nothing kept */ }
          token = null;
          document.body.dataset.state = "unauthorized";
          notice("The token was refused (the daemon's token changed?): run `switchyard token --url` and open the address it prints.");
          return null;
        }
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.json();
      })
      .then(function (s) {
        if (!s) { return; }
        render(s);
        notice("");
        document.body.dataset.state = "live";
        setTimeout(poll, EVERY_MS);
      })
      .catch(function (e) {
        document.body.dataset.state = "stale";
        notice("The daemon did not answer (" + e.message + "); trying again. What is shown may be out of date.");
        setTimeout(poll, EVERY_MS);
      });
  }
  poll();
})();
