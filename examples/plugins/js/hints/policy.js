// hints: overrides the annotations of matching tools and lets read-only ones run in parallel.
//
// The JavaScript twin of the Rust `hints` example (switchyard:policy@0.2.0). Config:
// {"tools": {"<glob>": {"readOnlyHint": true, "idempotentHint": true, "destructiveHint": false,
// "openWorldHint": false, "title": "..."}}}. Only the fields given are overridden; the most
// specific matching glob (most literal characters) wins.

import { log } from 'switchyard:policy/host@0.2.0';

const FLAGS = {
  readOnlyHint: 'readOnly',
  destructiveHint: 'destructive',
  idempotentHint: 'idempotent',
  openWorldHint: 'openWorld',
};

// [glob, RegExp, {field of hints: value}]; filled by init (one instance is single-threaded).
let rules = [];

function globRegExp(pattern) {
  const body = pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.');
  return new RegExp(`^${body}$`, 's');
}

function parseOverride(pattern, value) {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw `tools.${pattern} must be an object`;
  }
  const override = {};
  for (const [key, v] of Object.entries(value)) {
    if (key in FLAGS) {
      if (typeof v !== 'boolean') throw `tools.${pattern}.${key} must be true or false`;
      override[FLAGS[key]] = v;
    } else if (key === 'title') {
      if (typeof v !== 'string') throw `tools.${pattern}.title must be a string`;
      override.title = v;
    } else {
      throw `tools.${pattern}: unknown hint \`${key}\``;
    }
  }
  return override;
}

function ruleFor(name) {
  const literal = (p) => [...p].filter((c) => c !== '*' && c !== '?').length;
  let best;
  for (const rule of rules) {
    if (!rule[1].test(name)) continue;
    const better = !best || literal(rule[0]) > literal(best[0]) ||
      (literal(rule[0]) === literal(best[0]) && rule[0] < best[0]);
    if (better) best = rule;
  }
  return best && best[2];
}

export function init(config) {
  const parsed = JSON.parse(config);
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw 'the config must be a JSON object';
  }
  const unknown = Object.keys(parsed).find((k) => k !== 'tools');
  if (unknown !== undefined) throw `unknown key \`${unknown}\` (hints knows only \`tools\`)`;
  const tools = parsed.tools ?? {};
  if (typeof tools !== 'object' || tools === null || Array.isArray(tools)) {
    throw '`tools` must be an object of glob -> hints';
  }
  rules = Object.entries(tools).map(([p, v]) => [p, globRegExp(p), parseOverride(p, v)]);
  if (rules.length === 0) log('warn', 'no `tools` configured: this plugin changes nothing');
}

export function decide(call, current) {
  // A tool this plugin declares read-only is promised safe, so it joins the shared gate.
  const rule = call.tool == null ? undefined : ruleFor(call.tool);
  if (rule && rule.readOnly === true) current.concurrency = { tag: 'shared' };
  return { tag: 'continue', val: current };
}

export function listTool(tool, current) {
  // Prompts and resource templates have no annotations.
  if (tool.kind !== 'tool') return current;
  const rule = ruleFor(tool.name);
  if (rule) current.hints = { ...current.hints, ...rule };
  return current;
}
