// A policy plugin that changes nothing: start your own from here.
//
// Built with `switchyard plugin build` (jco componentize, world `policy` of wit/policy.wit).
// Records are objects with camelCase fields (readOnly, timeoutMs), an absent option is
// `undefined`, a variant is `{ tag, val }`, and `init` refuses its config by throwing.

import { log } from 'switchyard:policy/host@0.1.0';

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
  // Example: refuse one tool, and run writes one at a time.
  //     if (call.tool === 'delete_file') {
  //       return { tag: 'reject', val: 'deleting files is not allowed here' };
  //     }
  //     if (call.declared.readOnly !== true) {
  //       current.concurrency = { tag: 'exclusive' };
  //     }
  // Continue hands the decision on; { tag: 'stop', val: current } would end the chain.
  return { tag: 'continue', val: current };
}

// Annotation hints for one listed tool; `current` is what earlier plugins made of them.
export function annotate(tool, current) {
  // Example: tell clients that `search` only reads, so they may run it in parallel.
  //     if (tool.name === 'search') {
  //       current.readOnly = true;
  //     }
  return current;
}
