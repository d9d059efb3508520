// A policy plugin with one example rule, to start your own from: `cursor` may neither call nor
// see `delete_file`, and anyone else's `delete_file` runs alone on its server. The recorded
// calls beside it (calls.jsonl) expect exactly that, so `switchyard plugin test` shows what an
// edit to the rule changes; record what your own rules should answer there too.
//
// Built with `switchyard plugin build` (jco componentize, world `policy` of wit/policy.wit,
// switchyard:policy@0.2.0). Records are objects with camelCase fields (readOnly, timeoutMs),
// an absent option is `undefined`, a variant is `{ tag, val }`, an enum is a string
// ('socket'), and `init` refuses its config by throwing.

import { log } from 'switchyard:policy/host@0.2.0';

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
