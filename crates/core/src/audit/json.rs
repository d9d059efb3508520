//! A [`Record`] written as its JSON line by hand, into the writer's reused buffer: the bytes
//! serde_json writes for it (members in the same order, the same ones left out, strings escaped
//! and numbers written as serde_json does), without serde's machinery per member. The tests
//! hold the two to the same bytes for any record.

use std::time::SystemTime;

use super::{Client, Decided, Deferred, Ended, HookNote, PluginRef, Record};

/// Appends `record` as one JSON object (no newline) to `out`; `deferred`, when given, supplies
/// the time and the arguments' hash that the writer thread fills in (see [`Deferred`]).
pub(super) fn write_record(out: &mut Vec<u8>, record: &Record, deferred: Option<&Deferred>) {
    let r = record;
    out.extend_from_slice(b"{\"time\":");
    match deferred {
        Some(d) => time(out, d.ended),
        None => string(out, &r.time),
    }
    match deferred.and_then(|d| d.trace_id.as_ref()) {
        Some(id) => {
            out.extend_from_slice(b",\"trace_id\":\"");
            hex(out, id);
            out.push(b'"');
        }
        None => {
            if let Some(t) = &r.trace_id {
                member(out, b"trace_id", t);
            }
        }
    }
    out.extend_from_slice(b",\"client\":");
    client(out, &r.client);
    member(out, b"session", &r.session);
    member(out, b"server", &r.server);
    if let Some(i) = &r.instance {
        member(out, b"instance", i);
    }
    member(out, b"method", &r.method);
    if let Some(t) = &r.tool {
        member(out, b"tool", t);
    }
    match deferred.and_then(|d| d.arguments_sha256.as_ref()) {
        Some(digest) => {
            out.extend_from_slice(b",\"arguments_sha256\":\"");
            hex(out, digest);
            out.push(b'"');
        }
        None => {
            if let Some(h) = &r.arguments_sha256 {
                member(out, b"arguments_sha256", h);
            }
        }
    }
    if let Some(a) = &r.arguments {
        out.extend_from_slice(b",\"arguments\":");
        serde_json::to_writer(&mut *out, a).expect("a JSON value always serialises");
    }
    if let Some(d) = &r.decision {
        out.extend_from_slice(b",\"decision\":");
        decision(out, d);
    }
    if !r.plugins.is_empty() {
        out.extend_from_slice(b",\"plugins\":");
        list(out, &r.plugins, plugin);
    }
    if let Some(by) = &r.refused_by {
        member(out, b"refused_by", by);
    }
    if !r.hooks.is_empty() {
        out.extend_from_slice(b",\"hooks\":");
        list(out, &r.hooks, hook);
    }
    out.extend_from_slice(b",\"wait_ms\":{\"queue\":");
    float(out, r.wait_ms.queue);
    out.extend_from_slice(b",\"gate\":");
    float(out, r.wait_ms.gate);
    out.extend_from_slice(b"},\"outcome\":");
    ended(out, &r.outcome);
    out.extend_from_slice(b",\"attempts\":");
    integer(out, r.attempts);
    out.extend_from_slice(b",\"duration_ms\":");
    float(out, r.duration_ms);
    out.extend_from_slice(b",\"request_bytes\":");
    integer(out, r.request_bytes);
    out.extend_from_slice(b",\"response_bytes\":");
    integer(out, r.response_bytes);
    out.push(b'}');
}

fn client(out: &mut Vec<u8>, c: &Client) {
    out.push(b'{');
    // `transport` is always there: the members before it end in a comma.
    if let Some(n) = &c.name {
        key(out, b"name");
        string(out, n);
        out.push(b',');
    }
    if let Some(v) = &c.version {
        key(out, b"version");
        string(out, v);
        out.push(b',');
    }
    key(out, b"transport");
    string(out, &c.transport);
    if let Some(d) = &c.dir {
        member(out, b"dir", d);
    }
    if let Some(p) = &c.profile {
        member(out, b"profile", p);
    }
    if let Some(t) = &c.credential {
        member(out, b"credential", t);
    }
    out.push(b'}');
}

fn decision(out: &mut Vec<u8>, d: &Decided) {
    out.extend_from_slice(b"{\"concurrency\":");
    string(out, &d.concurrency);
    if d.keys != 0 {
        out.extend_from_slice(b",\"keys\":");
        integer(out, d.keys);
    }
    member(out, b"pool", &d.pool);
    out.extend_from_slice(b",\"timeout_ms\":");
    integer(out, d.timeout_ms);
    if let Some(r) = d.retry {
        out.extend_from_slice(b",\"retry\":");
        integer(out, r);
    }
    out.push(b'}');
}

fn plugin(out: &mut Vec<u8>, p: &PluginRef) {
    out.extend_from_slice(b"{\"name\":");
    string(out, &p.name);
    member(out, b"sha256", &p.sha256);
    out.push(b'}');
}

fn hook(out: &mut Vec<u8>, h: &HookNote) {
    out.extend_from_slice(b"{\"plugin\":");
    string(out, &h.plugin);
    member(out, b"phase", &h.phase);
    member(out, b"verdict", &h.verdict);
    member(out, b"mode", &h.mode);
    out.push(b'}');
}

fn ended(out: &mut Vec<u8>, e: &Ended) {
    out.extend_from_slice(b"{\"result\":");
    string(out, &e.result);
    if e.is_error {
        out.extend_from_slice(b",\"is_error\":true");
    }
    if let Some(c) = e.code {
        out.extend_from_slice(b",\"code\":");
        integer(out, c);
    }
    if e.timeout {
        out.extend_from_slice(b",\"timeout\":true");
    }
    if e.cancelled {
        out.extend_from_slice(b",\"cancelled\":true");
    }
    if e.unknown {
        out.extend_from_slice(b",\"unknown\":true");
    }
    out.push(b'}');
}

fn list<T>(out: &mut Vec<u8>, items: &[T], item: fn(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (n, i) in items.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        item(out, i);
    }
    out.push(b']');
}

/// `"name":` (names are plain ASCII: nothing to escape).
fn key(out: &mut Vec<u8>, name: &[u8]) {
    out.push(b'"');
    out.extend_from_slice(name);
    out.extend_from_slice(b"\":");
}

/// `,"name":"value"`: a string member after the first.
fn member(out: &mut Vec<u8>, name: &[u8], value: &str) {
    out.push(b',');
    key(out, name);
    string(out, value);
}

fn integer(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// As serde_json writes an `f64`: the shortest text that reads back the same, `null` when not finite.
fn float(out: &mut Vec<u8>, x: f64) {
    if x.is_finite() {
        out.extend_from_slice(zmij::Buffer::new().format_finite(x).as_bytes());
    } else {
        out.extend_from_slice(b"null");
    }
}

fn time(out: &mut Vec<u8>, t: SystemTime) {
    out.push(b'"');
    super::time::push_rfc3339(out, t);
    out.push(b'"');
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `bytes` (a hash or an id, 32 bytes at most) in lower-case hex.
fn hex<const N: usize>(out: &mut Vec<u8>, bytes: &[u8; N]) {
    let mut text = [0u8; 64];
    for (pair, b) in text.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&[HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
    }
    out.extend_from_slice(&text[..2 * N]);
}

/// How serde_json escapes a byte of a string: 0 for none, `u` for `\u00XX`, else the letter
/// after the backslash.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// `s` as a JSON string, escaped as serde_json escapes it (`"`, `\`, the control characters;
/// everything else, non-ASCII included, as its UTF-8).
fn string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    // Most texts need no escape: eight bytes at a time until one might.
    let plain = plain_prefix(bytes);
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate().skip(plain) {
        let escape = ESCAPE[usize::from(b)];
        if escape == 0 {
            continue;
        }
        out.extend_from_slice(&bytes[run..i]);
        run = i + 1;
        if escape == b'u' {
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
        } else {
            out.extend_from_slice(&[b'\\', escape]);
        }
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

/// How many of the first bytes of `bytes` surely need no escape: whole words of eight with no
/// control character, quote or backslash (a word that may have one ends the count; the byte
/// loop looks at it).
fn plain_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Some byte of `w` is zero (or, past a zero byte, may seem so: only ever too careful).
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGH;
    let mut n = 0;
    for chunk in bytes.chunks_exact(8) {
        let w = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH;
        if control | zero(w ^ (ONES * u64::from(b'"'))) | zero(w ^ (ONES * u64::from(b'\\'))) != 0 {
            break;
        }
        n += 8;
    }
    n
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;
    use std::time::{Duration, UNIX_EPOCH};

    use proptest::prelude::*;

    use super::super::Waits;
    use super::*;
    use crate::metrics::Outcome;

    /// The line as serde_json writes it: the reference the hand-written one must equal.
    fn serde_line(record: &Record) -> String {
        serde_json::to_string(record).expect("a record always serialises")
    }

    fn hand_line(record: &Record, deferred: Option<&Deferred>) -> String {
        let mut out = b"left from the last line\n".to_vec();
        let start = out.len();
        write_record(&mut out, record, deferred);
        String::from_utf8(out.split_off(start)).expect("UTF-8")
    }

    /// What the writer thread fills in, put in the record the way serde would then write it.
    fn filled(record: &Record, deferred: &Deferred) -> Record {
        let mut r = record.clone();
        r.time = super::super::time::rfc3339(deferred.ended);
        if let Some(digest) = &deferred.arguments_sha256 {
            r.arguments_sha256 = Some(crate::ids::hex(digest));
        }
        if let Some(id) = &deferred.trace_id {
            r.trace_id = Some(crate::ids::hex(id));
        }
        r
    }

    #[test]
    fn every_escape_serde_writes_is_written_the_same() {
        let all_ascii: String = (0u8..0x80).map(char::from).collect();
        let record = Record {
            time: all_ascii.clone(),
            session: "\"quoted\" \\ back\\slash \u{2028} é 😀 \u{7f}".into(),
            method: Cow::Owned(all_ascii),
            duration_ms: 1.5e300,
            wait_ms: Waits { queue: f64::NAN, gate: -0.0 },
            ..Default::default()
        };
        let line = hand_line(&record, None);
        assert_eq!(line, serde_line(&record));
        assert!(line.contains(r#"\u0000\u0001"#) && line.contains(r#"\b\t\n\u000b\f\r\u000e"#), "{line}");
    }

    fn text() -> impl Strategy<Value = String> {
        let tricky = prop_oneof![
            any::<char>(),
            prop::char::range('\0', '\x7f'),
            Just('"'),
            Just('\\'),
            Just('\u{2028}'),
            Just('é'),
            Just('😀')
        ];
        prop_oneof![
            12 => prop::collection::vec(tricky, 0..24).prop_map(String::from_iter),
            3 => any::<String>(),
            2 => Just(String::new()),
            1 => (any::<char>(), 0usize..100_000).prop_map(|(c, n)| c.to_string().repeat(n)),
        ]
    }

    fn shared() -> impl Strategy<Value = Arc<str>> {
        text().prop_map(Arc::from)
    }

    fn word() -> impl Strategy<Value = Cow<'static, str>> {
        prop_oneof![Just(Cow::Borrowed("tools/call")), Just(Cow::Borrowed("")), text().prop_map(Cow::Owned)]
    }

    fn number() -> impl Strategy<Value = f64> {
        prop_oneof![any::<f64>(), (0u64..10_000_000_000).prop_map(|us| us as f64 / 1000.0), Just(0.0)]
    }

    fn value() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            text().prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(text(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn client() -> impl Strategy<Value = Client> {
        let o = || proptest::option::of(shared());
        (o(), o(), word(), o(), proptest::option::of(text()), o()).prop_map(
            |(name, version, transport, dir, profile, credential)| Client {
                name,
                version,
                transport,
                dir,
                profile,
                credential,
            },
        )
    }

    fn decided() -> impl Strategy<Value = Decided> {
        (word(), prop_oneof![Just(0usize), any::<usize>()], word(), any::<u64>(), proptest::option::of(any::<u32>()))
            .prop_map(|(concurrency, keys, pool, timeout_ms, retry)| Decided {
                concurrency,
                keys,
                pool,
                timeout_ms,
                retry,
            })
    }

    fn ended() -> impl Strategy<Value = Ended> {
        const ALL: [Outcome; 9] = Outcome::ALL;
        let code = || proptest::option::of(any::<i64>());
        prop_oneof![
            (0..ALL.len(), code(), any::<bool>()).prop_map(|(n, code, sent)| Ended::of(ALL[n], code, sent)),
            (word(), any::<[bool; 4]>(), code()).prop_map(|(result, [is_error, timeout, cancelled, unknown], code)| {
                Ended { result, is_error, code, timeout, cancelled, unknown }
            }),
        ]
    }

    fn record() -> impl Strategy<Value = Record> {
        use proptest::option::of as o;
        let who = (text(), o(text()), client(), shared(), shared(), o(text()), word(), o(shared()));
        let what = (
            o(text()),
            o(value()),
            o(decided()),
            prop::collection::vec((text(), text()).prop_map(|(name, sha256)| PluginRef { name, sha256 }), 0..3),
            o(text()),
            prop::collection::vec(
                (text(), text(), text(), text()).prop_map(|(plugin, phase, verdict, mode)| HookNote {
                    plugin,
                    phase,
                    verdict,
                    mode,
                }),
                0..3,
            ),
        );
        let how = ((number(), number()), ended(), any::<u32>(), number(), any::<u64>(), any::<u64>());
        (who, what, how).prop_map(|(who, what, how)| {
            let (time, trace_id, client, session, server, instance, method, tool) = who;
            let (arguments_sha256, arguments, decision, plugins, refused_by, hooks) = what;
            let ((queue, gate), outcome, attempts, duration_ms, request_bytes, response_bytes) = how;
            Record {
                time,
                trace_id,
                client,
                session,
                server,
                instance,
                method,
                tool,
                arguments_sha256,
                arguments,
                decision,
                plugins,
                refused_by,
                hooks,
                wait_ms: Waits { queue, gate },
                outcome,
                attempts,
                duration_ms,
                request_bytes,
                response_bytes,
            }
        })
    }

    fn deferred() -> impl Strategy<Value = Deferred> {
        let ms = prop_oneof![0u64..4_102_444_800_000, any::<u64>().prop_map(|ms| ms >> 4)];
        (ms, any::<Option<[u8; 32]>>(), any::<Option<[u8; 16]>>()).prop_map(|(ms, arguments_sha256, trace_id)| {
            Deferred { ended: UNIX_EPOCH + Duration::from_millis(ms), arguments_sha256, trace_id }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn the_hand_written_line_is_the_line_serde_writes(record in record()) {
            prop_assert_eq!(hand_line(&record, None), serde_line(&record));
            prop_assert_eq!(record.line(), serde_line(&record));
        }

        #[test]
        fn what_the_writer_fills_in_is_written_as_serde_writes_it(record in record(), deferred in deferred()) {
            prop_assert_eq!(hand_line(&record, Some(&deferred)), serde_line(&filled(&record, &deferred)));
        }
    }
}
