// A policy plugin with one example rule, to start your own from: `cursor` may neither call nor
// see `delete_file`, and anyone else's `delete_file` runs alone on its server. The recorded
// calls beside it (calls.jsonl) expect exactly that, so `switchyard plugin test` shows what an
// edit to the rule changes; record what your own rules should answer there too.
//
// It also has the content hooks of 0.3 (onRequest, onResult), which read and may change or
// refuse a call's params and its result. As written they pass everything on unchanged, for the
// calls `interest` declares; a commented example in each shows what a rule looks like.
//
// Built with `switchyard plugin build` (jco componentize, world `policy` of wit/policy.wit,
// switchyard:policy@0.3.0). Records are objects with camelCase fields (readOnly, timeoutMs),
// an absent option is `undefined`, a variant is `{ tag, val }`, an enum is a string
// ('socket'), and `init` refuses its config by throwing.

import { log } from 'switchyard:policy/host@0.3.0';

// Runs once per instance with the plugin's `config` from switchyard.toml (JSON text).
// Refuse what you do not understand: a typo in a key must not leave the plugin doing nothing.
export function init(config) {
  if (Object.keys(JSON.parse(config)).length !== 0) {
    throw `this plugin takes no config, got ${config}`;
  }
  log('debug', 'plugin ready');
}

// Decides how one request is handled; `current` is what earlier plugins decided.
export function decide(call, current) {
  // The example rule: refuse one tool to one client (`call.client.name` is the name it gave)...
  if (call.client.name === 'cursor' && call.tool === 'delete_file') {
    return { tag: 'reject', val: 'cursor may not delete files here' };
  }
  // ...and run everyone else's call of it alone (set a field of `current`, keep the others).
  if (call.tool === 'delete_file') {
    current.concurrency = { tag: 'exclusive' };
  }
  // Add your rules here. Continue hands the decision on; { tag: 'stop', val: current } would
  // end the chain.
  return { tag: 'continue', val: current };
}

// How one listed tool is shown to the client it is listed to; `current` is what earlier
// plugins made of it.
export function listTool(tool, current) {
  // The example rule: hide one tool from one client; the others still see it.
  if (tool.client.name === 'cursor' && tool.name === 'delete_file') {
    current.hidden = true;
  }
  // Add your rules here (rename with current.name, reword with current.description).
  return current;
}

// Which calls the two hooks below see; asked once, after `init`. A call outside it never enters
// them and costs nothing, so declare no more than your rules need (an empty `methods` turns the
// hooks off).
export function interest() {
  return {
    // Globs on the JSON-RPC method, e.g. 'tools/call', 'resources/read', 'resources/*'.
    methods: ['tools/call'],
    // For tools/call: globs on the server's name of the tool; empty means every tool.
    tools: [],
    request: true,
    result: true,
  };
}

// A request's `params` (JSON text) before the call is sent: for a tools/call, `name` and
// `arguments`. Runs before `decide` (which then judges the params the hooks made), in the
// chain's order.
export function onRequest(call, params) {
  // An example: refuse a tool's argument.
  // if (call.tool === 'write_file' && (JSON.parse(params).arguments?.path ?? '').startsWith('/etc/')) {
  //   return { tag: 'deny', val: 'writing under /etc is not allowed here' };
  // }
  // { tag: 'modify', val: newParams } would send other params instead (the same `name`).
  return { tag: 'continue' };
}

// The server's `result` (JSON text) before the client gets it. Runs in the reverse of the
// chain's order, on the final result only.
export function onResult(call, result) {
  // An example: change what the model reads (here, hide an internal host name).
  // if (result.includes('db.internal')) {
  //   return { tag: 'modify', val: result.replaceAll('db.internal', '[internal host]') };
  // }
  // { tag: 'deny', val: reason } would drop the result and answer an error result instead.
  return { tag: 'continue' };
}
