//! A client's request, read once: the [`Call`] every stage of the router reads instead of
//! parsing the request again.
//!
//! [`codec::parse`] finds the envelope; [`Call::read`] then reads the params object once for
//! every field a later stage routes, decides, traces or logs on. Like the codec it keeps byte
//! ranges into the line it holds, never a tree of the payload: a rewrite is a splice
//! ([`Call::splice`]) that moves the ranges with it.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::codec::{self, Envelope, ParseError};

/// A client's request (it has an id), its params read once.
#[derive(Debug, Clone)]
pub struct Call {
    line: String,
    env: Envelope,
    fields: Fields,
}

/// Why a client's request is refused before it runs, with its answer (see [`Call::admit`]).
#[derive(Debug)]
pub enum Refused {
    /// A key switchyard reads is given twice in its params.
    Unread(String),
    /// Its id is in use by a request still in flight.
    InUse(String),
}

impl Refused {
    /// The answer to the client.
    pub fn into_answer(self) -> String {
        match self {
            Refused::Unread(a) | Refused::InUse(a) => a,
        }
    }
}

/// Why a request under the raw id `id` is refused while a request under it is in flight: the
/// words of every reader of a client (a session, a group, the HTTP front).
pub fn in_use(id: &str) -> String {
    format!("Invalid Request: id {id} is already in use by a request still in flight")
}

/// One message of a client's (not a batch), read once: what a session of one server and a
/// group both make of a line before they act on it.
// `Request` is the large one: its `Call` is moved on, once, to where it runs; boxing it would
// cost an allocation per request.
#[allow(clippy::large_enum_variant)]
pub enum Incoming {
    /// A request, its params read.
    Request(Call),
    Notification(String, Envelope),
    Response(String, Envelope),
    /// No valid message: answered at once ([`ParseError::answer`]).
    Refused(ParseError),
    /// A notification that does not read: JSON-RPC allows no answer to one, so it is dropped
    /// (the reader says so in its log).
    Dropped(ParseError),
}

impl Incoming {
    /// Reads `line`, one message: its envelope by [`codec::parse`], a request's params by
    /// [`Call::read`].
    pub fn read(line: String) -> Incoming {
        match codec::parse(&line) {
            Ok(env) => match env.kind {
                codec::Kind::Request => Incoming::Request(Call::read(line, env)),
                codec::Kind::Notification => Incoming::Notification(line, env),
                codec::Kind::Response => Incoming::Response(line, env),
            },
            Err(e @ ParseError::BadNotification { .. }) => Incoming::Dropped(e),
            Err(e) => Incoming::Refused(e),
        }
    }
}

/// Where the fields of a request's params are in its line. Each is None when absent; a field
/// read as a string (the JSON string, quotes included) is also None when it is not a string.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fields {
    /// `name`, a string (tools/call, prompts/get).
    pub name: Option<Range<usize>>,
    /// `uri`, a string (resources/read, resources/subscribe).
    pub uri: Option<Range<usize>>,
    /// `arguments`, any JSON (tools/call, prompts/get): given to plugins as it is.
    pub arguments: Option<Range<usize>>,
    /// `level`, a string (logging/setLevel).
    pub level: Option<Range<usize>>,
    /// `cursor`, any JSON, `null` included (the next page of a list).
    pub cursor: Option<Range<usize>>,
    /// `ref`, an object (completion/complete: the prompt or resource it completes for), read
    /// further by [`Call::reference`].
    pub reference: Option<Range<usize>>,
    /// `taskId`, a string (tasks/get, tasks/result, tasks/cancel, tasks/update).
    pub task_id: Option<Range<usize>>,
    /// `requestState`, a string (the 2026-07-28 retry of a request the server answered
    /// `input_required`).
    pub request_state: Option<Range<usize>>,
    /// `_meta.progressToken`, any JSON: the client asks for progress under it.
    pub progress_token: Option<Range<usize>>,
    /// `_meta["io.modelcontextprotocol/protocolVersion"]`, a string: only a request of the
    /// 2026-07-28 era carries it (it needs no initialize).
    pub protocol_version: Option<Range<usize>>,
    /// `_meta["io.modelcontextprotocol/clientCapabilities"]`, any JSON (a request of the
    /// 2026-07-28 era must carry it, an object).
    pub client_capabilities: Option<Range<usize>>,
    /// `_meta["io.modelcontextprotocol/clientInfo"].name` and `.version`, strings: who sent a
    /// request of the 2026-07-28 era, which has no initialize to say so.
    pub client_name: Option<Range<usize>>,
    pub client_version: Option<Range<usize>>,
    /// `_meta.traceparent` and `_meta.tracestate`, strings: the W3C trace context the client
    /// sent (the 2026-07-28 revision reserves these keys). Read here for the call's span, and
    /// for the context passed on to the server; not checked for form.
    pub traceparent: Option<Range<usize>>,
    pub tracestate: Option<Range<usize>>,
    /// `_meta`, an object: where a trace context the client did not send is put in for the
    /// server.
    pub meta: Option<Range<usize>>,
    /// The params hold what a splice cannot trace safely: a key given twice (in the params or
    /// their `_meta`; a server's parser may take either), a `_meta` that is no object, or a
    /// `traceparent` or `tracestate` that is no string. The trace context then goes in by a
    /// slower read (`switchyard_telemetry::context`).
    pub odd_meta: bool,
    /// Why the params object did not read, when it did not: a key switchyard reads (`name`,
    /// `arguments`, `_meta`, ...) given twice. Every field above is then None; the session
    /// refuses such a request, as its parsers disagree on which value counts (a policy would
    /// judge one tool while the server, which takes the last, ran another).
    pub unread: Option<String>,
}

impl Fields {
    /// The same fields with every range moved by `f`.
    fn map(&self, f: impl Fn(&Range<usize>) -> Range<usize>) -> Fields {
        let m = |r: &Option<Range<usize>>| r.as_ref().map(&f);
        Fields {
            name: m(&self.name),
            uri: m(&self.uri),
            arguments: m(&self.arguments),
            level: m(&self.level),
            cursor: m(&self.cursor),
            reference: m(&self.reference),
            task_id: m(&self.task_id),
            request_state: m(&self.request_state),
            progress_token: m(&self.progress_token),
            protocol_version: m(&self.protocol_version),
            client_capabilities: m(&self.client_capabilities),
            client_name: m(&self.client_name),
            client_version: m(&self.client_version),
            traceparent: m(&self.traceparent),
            tracestate: m(&self.tracestate),
            meta: m(&self.meta),
            odd_meta: self.odd_meta,
            unread: self.unread.clone(),
        }
    }
}

#[derive(Deserialize)]
struct RawParams<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uri: Option<&'a RawValue>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
    #[serde(borrow, default)]
    level: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cursor: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "ref")]
    reference: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "taskId")]
    task_id: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "requestState")]
    request_state: Option<&'a RawValue>,
    // Taken raw and read on its own: a `_meta` of an unexpected shape hides no other field.
    #[serde(borrow, default, rename = "_meta", deserialize_with = "raw")]
    meta: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawMeta<'a> {
    #[serde(borrow, default, rename = "progressToken")]
    progress_token: Option<&'a RawValue>,
    // The keys of `switchyard_mcp::meta` (serde needs them written out).
    #[serde(borrow, default, rename = "io.modelcontextprotocol/protocolVersion")]
    protocol_version: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "io.modelcontextprotocol/clientCapabilities")]
    client_capabilities: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "io.modelcontextprotocol/clientInfo")]
    client_info: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    traceparent: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    tracestate: Option<&'a RawValue>,
}

/// A member's raw value, `null` included (as `Option` alone reads it, `null` is no member: a
/// `traceparent` of `null` would then be doubled, not replaced).
fn raw<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct RawClientInfo<'a> {
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    version: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawRef<'a> {
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    name: Option<&'a RawValue>,
    #[serde(borrow, default)]
    uri: Option<&'a RawValue>,
}

/// The `ref` of a completion/complete, as ranges of its line: what it completes for. Each is a
/// string (as [`Call::string`] reads it), None when absent or not a string.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `type` (`ref/prompt`, `ref/resource`).
    pub kind: Option<Range<usize>>,
    /// `name` (of a prompt).
    pub name: Option<Range<usize>>,
    /// `uri` (of a resource or a template).
    pub uri: Option<Range<usize>>,
}

/// An object's members as `T`, or None when the text is no object or does not read as one.
fn object<'a, T: Deserialize<'a>>(raw: Option<&'a RawValue>) -> Option<T> {
    raw.filter(|r| r.get().starts_with('{')).and_then(|r| serde_json::from_str(r.get()).ok())
}

/// Reads the fields of `line`'s params object (at `params`): one pass over the params, whose
/// `_meta` (and its `clientInfo`), skipped in that pass, is then read on its own.
fn read_fields(line: &str, params: &Range<usize>) -> Fields {
    let text = &line[params.clone()];
    if !text.starts_with('{') {
        return Fields::default();
    }
    let p = match codec::read_params::<RawParams>(text) {
        Ok(p) => p,
        Err(e) => {
            // serde's words ("duplicate field `name`"), without its position in the params.
            let why = e.to_string();
            let why = why.split(" at line ").next().unwrap_or(&why).to_string();
            return Fields { odd_meta: true, unread: Some(why), ..Fields::default() };
        }
    };
    let at = |r: Option<&RawValue>| r.map(|r| codec::span(line, r.get()));
    let string = |r: Option<&RawValue>| at(r.filter(|r| r.get().starts_with('"')));
    let meta = object::<RawMeta>(p.meta);
    let client = object::<RawClientInfo>(meta.as_ref().and_then(|m| m.client_info));
    let not_string = |r: Option<&RawValue>| r.is_some_and(|r| !r.get().starts_with('"'));
    let odd_meta = match (&meta, p.meta) {
        (Some(m), _) => not_string(m.traceparent) || not_string(m.tracestate),
        (None, raw) => raw.is_some(),
    };
    Fields {
        name: string(p.name),
        uri: string(p.uri),
        arguments: at(p.arguments),
        level: string(p.level),
        cursor: at(p.cursor),
        reference: at(p.reference.filter(|r| r.get().starts_with('{'))),
        task_id: string(p.task_id),
        request_state: string(p.request_state),
        progress_token: at(meta.as_ref().and_then(|m| m.progress_token)),
        protocol_version: string(meta.as_ref().and_then(|m| m.protocol_version)),
        client_capabilities: at(meta.as_ref().and_then(|m| m.client_capabilities)),
        client_name: string(client.as_ref().and_then(|c| c.name)),
        client_version: string(client.as_ref().and_then(|c| c.version)),
        traceparent: string(meta.as_ref().and_then(|m| m.traceparent)),
        tracestate: string(meta.as_ref().and_then(|m| m.tracestate)),
        meta: at(p.meta.filter(|m| m.get().starts_with('{'))),
        odd_meta,
        unread: None,
    }
}

/// `r` after the bytes at `at` were replaced by `len` bytes: JSON values either nest or are
/// apart, so a range after `at` moves, one holding it grows, one before it stays.
fn moved(r: &Range<usize>, at: &Range<usize>, len: usize) -> Range<usize> {
    let by = |x: usize| x - at.len() + len;
    if r.start >= at.end {
        by(r.start)..by(r.end)
    } else if r.end >= at.end {
        r.start..by(r.end)
    } else {
        r.clone()
    }
}

impl Call {
    /// The request in `line`, whose envelope `codec::parse` found to be `env` (a request: it
    /// has an id). Its params are read here, once.
    pub fn read(line: String, env: Envelope) -> Call {
        debug_assert!(env.id.is_some() && env.method.is_some(), "a request has an id and a method");
        let fields = env.params.as_ref().map(|p| read_fields(&line, p)).unwrap_or_default();
        Call { line, env, fields }
    }

    /// Parses `line`, a request switchyard wrote or rewrote (a page of a list it asks for).
    /// Err also when the line is no request.
    pub fn parse(line: String) -> Result<Call, ParseError> {
        let env = codec::parse(&line)?;
        if env.kind != codec::Kind::Request {
            let reason = "switchyard wrote a message that is no request".to_string();
            return Err(ParseError::Invalid { reason, id: None });
        }
        Ok(Call::read(line, env))
    }

    /// The client's answer to this request when its params did not read (a key switchyard reads
    /// given twice, see [`Fields::unread`]): an invalid request, which must reach no server, as
    /// parsers disagree on which of the two values counts.
    pub fn unread_answer(&self) -> Option<String> {
        let why = self.fields.unread.as_deref()?;
        let message = format!(
            "Invalid Request: its params have a {why}; parsers disagree on which value counts, so switchyard does not pass it on: send each key once"
        );
        Some(codec::response_error(self.id(), codec::INVALID_REQUEST, &message, None))
    }

    /// The request refused as every reader of a client refuses one before it runs: when its
    /// params did not read ([`Call::unread_answer`]), or when its id is in use by a request still
    /// in flight. `claim` books the id in the reader's table of requests in flight; false: it
    /// is in use there. Err: why, with the answer.
    pub fn admit(&self, claim: impl FnOnce(&str) -> bool) -> Result<(), Refused> {
        if let Some(answer) = self.unread_answer() {
            return Err(Refused::Unread(answer));
        }
        if !claim(self.id()) {
            let id = self.id();
            return Err(Refused::InUse(codec::response_error(id, codec::INVALID_REQUEST, &in_use(id), None)));
        }
        Ok(())
    }

    /// The `ref` of a completion/complete (None when there is no `ref` object): read from its
    /// text, which the one read of the params left whole.
    pub fn reference(&self) -> Option<Reference> {
        let at = self.fields.reference.as_ref()?;
        let text = &self.line[at.clone()];
        let raw: RawRef = serde_json::from_str(text).ok()?;
        let span =
            |r: Option<&RawValue>| r.filter(|r| r.get().starts_with('"')).map(|r| codec::span(&self.line, r.get()));
        Some(Reference { kind: span(raw.kind), name: span(raw.name), uri: span(raw.uri) })
    }

    /// The request as it arrived (or as it was spliced).
    pub fn line(&self) -> &str {
        &self.line
    }

    pub fn into_line(self) -> String {
        self.line
    }

    pub fn envelope(&self) -> &Envelope {
        &self.env
    }

    /// Where the params' fields are.
    pub fn fields(&self) -> &Fields {
        &self.fields
    }

    /// Where the raw id is (e.g. `7` or `"abc"`).
    pub fn id_range(&self) -> Range<usize> {
        self.env.id.clone().expect("requests have ids")
    }

    /// The raw id, as the client wrote it: what its response carries back.
    pub fn id(&self) -> &str {
        &self.line[self.id_range()]
    }

    pub fn method(&self) -> &str {
        self.env.method.as_deref().unwrap_or_default()
    }

    /// The params object's text, if the request has params.
    pub fn params(&self) -> Option<&str> {
        self.env.params.as_ref().map(|p| &self.line[p.clone()])
    }

    /// The text at `range` (a field's raw JSON).
    pub fn text(&self, range: &Option<Range<usize>>) -> Option<&str> {
        range.as_ref().map(|r| &self.line[r.clone()])
    }

    /// The string at `range` (a field read as a string), its escapes undone.
    pub fn string(&self, range: &Option<Range<usize>>) -> Option<Cow<'_, str>> {
        let raw = self.text(range)?;
        match raw.contains('\\') {
            false => Some(Cow::Borrowed(&raw[1..raw.len() - 1])),
            true => serde_json::from_str::<String>(raw).ok().map(Cow::Owned),
        }
    }

    /// `name` (tools/call, prompts/get).
    pub fn name(&self) -> Option<Cow<'_, str>> {
        self.string(&self.fields.name)
    }

    /// The protocol version a 2026-07-28-era request carries in `_meta` (None: a request of the
    /// initialize era).
    pub fn protocol_version(&self) -> Option<Cow<'_, str>> {
        self.string(&self.fields.protocol_version)
    }

    /// [`Call::splice`] of a request not needed after: in its own line's buffer, which grows
    /// only when `with` is longer than what it replaces.
    pub fn into_spliced(self, at: Range<usize>, with: &str) -> Call {
        let m = |r: &Range<usize>| moved(r, &at, with.len());
        let env = Envelope {
            id: self.env.id.as_ref().map(m),
            params: self.env.params.as_ref().map(m),
            result: self.env.result.as_ref().map(m),
            ..self.env
        };
        let fields = self.fields.map(m);
        Call { line: codec::splice_owned(self.line, at, with), env, fields }
    }

    /// The request with the bytes at `at` (a range of it) replaced by `with`, its ranges moved
    /// to match: a rewrite without a second parse.
    pub fn splice(&self, at: Range<usize>, with: &str) -> Call {
        let line = codec::splice(&self.line, at.clone(), with);
        let m = |r: &Range<usize>| moved(r, &at, with.len());
        let env = Envelope {
            id: self.env.id.as_ref().map(m),
            params: self.env.params.as_ref().map(m),
            result: self.env.result.as_ref().map(m),
            ..self.env.clone()
        };
        Call { line, env, fields: self.fields.map(m) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(line: &str) -> Call {
        Call::parse(line.to_string()).expect("a request")
    }

    #[test]
    fn params_with_a_key_given_twice_are_unread_and_say_which() {
        for (params, key) in [
            (r#"{"name":"echo","name":"rm"}"#, "name"),
            (r#"{"name":"read","arguments":{"path":"/ok"},"arguments":{"path":"/etc/shadow"}}"#, "arguments"),
            (r#"{"name":"echo","_meta":{},"_meta":{"progressToken":1}}"#, "_meta"),
        ] {
            let c = call(&codec::request("1", "tools/call", params));
            let why = c.fields().unread.as_deref().unwrap_or_else(|| panic!("{params} read"));
            assert_eq!(why, format!("duplicate field `{key}`"), "{params}");
            // Nothing of it is taken for what the server would read.
            assert_eq!((c.name(), c.fields().arguments.clone()), (None, None), "{params}");
        }
        // A key switchyard does not read may come twice (the server decides what it means).
        let c = call(&codec::request("1", "tools/call", r#"{"name":"echo","x":1,"x":2}"#));
        assert_eq!((c.fields().unread.as_deref(), c.name().as_deref()), (None, Some("echo")));
    }

    #[test]
    fn a_request_s_fields_are_read_in_one_pass() {
        use switchyard_mcp::meta;
        // The keys as the protocol names them (serde's are written out).
        let meta = serde_json::json!({
            "progressToken": 7,
            meta::PROTOCOL_VERSION: "2026-07-28",
            meta::CLIENT_CAPABILITIES: {"sampling": {}},
            meta::CLIENT_INFO: {"name": "cli", "version": "1.2"},
            meta::TRACEPARENT: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            meta::TRACESTATE: "k=v",
        });
        let params = serde_json::json!({"name": "e\"cho", "arguments": {"x": [1]}, "_meta": meta});
        let c = call(&codec::request(r#""a""#, "tools/call", &params.to_string()));
        let f = c.fields();
        assert_eq!((c.id(), c.method()), (r#""a""#, "tools/call"));
        assert_eq!(c.name().as_deref(), Some("e\"cho"));
        assert_eq!(c.text(&f.arguments), Some(r#"{"x":[1]}"#));
        assert_eq!(c.text(&f.progress_token), Some("7"));
        assert_eq!(c.protocol_version().as_deref(), Some("2026-07-28"));
        assert_eq!(c.text(&f.client_capabilities), Some(r#"{"sampling":{}}"#));
        assert_eq!(
            (c.string(&f.client_name).as_deref(), c.string(&f.client_version).as_deref()),
            (Some("cli"), Some("1.2"))
        );
        assert_eq!(
            c.string(&f.traceparent).as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        assert_eq!(c.string(&f.tracestate).as_deref(), Some("k=v"));
        assert_eq!(c.text(&f.meta).map(|m| serde_json::from_str::<serde_json::Value>(m).unwrap()), Some(meta));
        let plain = call(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#);
        assert_eq!((plain.params(), plain.fields()), (None, &Fields::default()));
    }

    #[test]
    fn a_field_of_an_odd_shape_hides_no_other() {
        let c = call(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5,"uri":"u","_meta":{"io.modelcontextprotocol/clientInfo":"x","progressToken":"t"}}}"#,
        );
        assert_eq!((c.name(), c.string(&c.fields().uri).as_deref()), (None, Some("u")));
        assert_eq!((c.fields().client_name.clone(), c.text(&c.fields().progress_token)), (None, Some(r#""t""#)));
        let c = call(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n","_meta":[1]}}"#);
        assert_eq!((c.name().as_deref(), c.fields().progress_token.clone()), (Some("n"), None));
        assert_eq!(c.fields().meta, None);
        let c = call(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":["name"]}"#);
        assert_eq!(c.fields(), &Fields::default());
    }

    #[test]
    fn a_request_is_admitted_once_its_params_read_and_its_id_is_free() {
        let c = call(&codec::request(r#""x""#, "tools/call", r#"{"name":"echo"}"#));
        let mut asked = None;
        assert!(
            c.admit(|id| {
                asked = Some(id.to_string());
                true
            })
            .is_ok()
        );
        assert_eq!(asked.as_deref(), Some(r#""x""#));
        let Err(Refused::InUse(answer)) = c.admit(|_| false) else { panic!("admitted under an id in use") };
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(
            (&v["id"], &v["error"]["code"]),
            (&serde_json::json!("x"), &serde_json::json!(codec::INVALID_REQUEST))
        );
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(msg.contains(r#"id "x" is already in use by a request still in flight"#), "{msg}");
        // Params that did not read are refused first, and book no id.
        let twice = call(&codec::request("1", "tools/call", r#"{"name":"a","name":"b"}"#));
        let booked = std::cell::Cell::new(false);
        assert!(matches!(
            twice.admit(|_| {
                booked.set(true);
                true
            }),
            Err(Refused::Unread(_))
        ));
        assert!(!booked.get());
    }

    #[test]
    fn a_line_is_read_as_what_it_is() {
        let read = |line: &str| Incoming::read(line.to_string());
        assert!(matches!(read(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Incoming::Request(c) if c.id() == "1"));
        assert!(matches!(
            read(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Incoming::Notification(..)
        ));
        assert!(matches!(read(r#"{"jsonrpc":"2.0","id":1,"result":{}}"#), Incoming::Response(..)));
        assert!(matches!(read(r#"{"jsonrpc":"2.0","method":"n","params":3}"#), Incoming::Dropped(_)));
        let Incoming::Refused(e) = read(r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#) else { panic!("read") };
        assert!(e.answer().starts_with(r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"#), "{}", e.answer());
    }

    #[test]
    fn a_completion_s_ref_is_read_from_the_text_the_params_read_left() {
        let c = call(&codec::request(
            "1",
            "completion/complete",
            r#"{"ref":{"type":"ref/prompt","name":"p\"q","uri":5},"argument":{"name":"a","value":""}}"#,
        ));
        let r = c.reference().expect("a ref");
        assert_eq!((c.string(&r.kind).as_deref(), c.string(&r.name).as_deref()), (Some("ref/prompt"), Some("p\"q")));
        assert_eq!(r.uri, None, "a uri that is no string");
        let spliced = c.clone().into_spliced(r.name.clone().unwrap(), r#""longer name""#);
        assert_eq!(spliced.fields(), call(spliced.line()).fields());
        let again = spliced.reference().unwrap();
        assert_eq!(spliced.string(&again.name).as_deref(), Some("longer name"));
        assert_eq!(call(&codec::request("1", "completion/complete", r#"{"ref":"x"}"#)).reference(), None);
    }

    #[test]
    fn a_splice_moves_the_ranges_after_it_and_grows_those_around_it() {
        let c = call(
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"short","_meta":{"progressToken":3}},"x":0}"#,
        );
        let s = c.splice(c.fields().task_id.clone().unwrap(), r#""a much longer one""#);
        assert_eq!(
            s.line(),
            r#"{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"a much longer one","_meta":{"progressToken":3}},"x":0}"#
        );
        let again = call(s.line());
        assert_eq!((s.fields(), s.envelope().params.clone()), (again.fields(), again.envelope().params.clone()));
        assert_eq!((s.id(), s.text(&s.fields().progress_token)), ("1", Some("3")));
        let shorter = s.splice(s.id_range(), "12345");
        assert_eq!(shorter.fields(), call(shorter.line()).fields());
        assert_eq!(shorter.id(), "12345");
    }
}
