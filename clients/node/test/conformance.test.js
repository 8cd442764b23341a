// The clients' conformance suite (clients/conformance/*.json, format in its
// README.md), run against the Node client: one test per scenario.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync, readdirSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createServer } from 'node:http';
import { randomBytes } from 'node:crypto';
import { Client, Outcome, IdemdError, TransportError, errorClasses } from 'idemd';
import { scopedKey } from 'idemd/express';

const here = dirname(fileURLToPath(import.meta.url));
const source = process.env.IDEMD_SOURCE_DIR ?? join(here, '..', '..', '..');
const dir = join(source, 'clients', 'conformance');
const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();

const SCENARIO_FIELDS = new Set(['name', 'description', 'clients', 'steps']);
const STEP_FIELDS = new Set(['op', 'args', 'client', 'stub', 'expect', 'save', 'background', 'await', 'note']);
const EXPECT_FIELDS = new Set(['result', 'error', 'requests', 'sent', 'min_elapsed_ms', 'max_elapsed_ms']);
const CLIENT_FIELDS = new Set(['server', 'api_key', 'retry']);

class ScenarioError extends Error {}
const fail = (msg) => { throw new ScenarioError(msg); };
const unknown = (obj, allowed, what) => {
  const extra = Object.keys(obj).filter((k) => !allowed.has(k));
  if (extra.length) fail(`${what}: unknown fields ${extra.join(', ')}`);
};
const show = (v) => { const s = JSON.stringify(v); return s === undefined ? 'undefined' : s.slice(0, 600); };

// ---------------------------------------------------------------- stub server

async function startStub() {
  const stub = { answers: [], requests: [] };
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      let body = null;
      if (raw) { try { body = JSON.parse(raw); } catch { body = raw; } }
      stub.requests.push({ method: req.method, path: req.url, headers: { ...req.headers }, body });
      let a;
      if (stub.answers.length > 1) a = stub.answers.shift();
      else a = stub.answers[0] ?? { status: 599, body_text: 'the scenario gave the stub no answer' };
      const headers = { ...(a.headers ?? {}) };
      const hasType = Object.keys(headers).some((k) => k.toLowerCase() === 'content-type');
      let payload = Buffer.alloc(0);
      if ('body' in a) {
        payload = Buffer.from(JSON.stringify(a.body));
        if (!hasType) headers['Content-Type'] = a.status >= 400 ? 'application/problem+json' : 'application/json';
      } else if ('body_text' in a) {
        payload = Buffer.from(a.body_text);
        if (!hasType) headers['Content-Type'] = 'text/plain';
      }
      headers['Content-Length'] = String(payload.length);
      res.writeHead(a.status, headers);
      res.end(payload);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  stub.url = `http://127.0.0.1:${server.address().port}`;
  stub.arm = (answers) => { stub.answers = [...(answers ?? [])]; stub.requests = []; };
  stub.close = () => new Promise((r) => { server.closeAllConnections?.(); server.close(r); });
  return stub;
}

// ---------------------------------------------------------------- patterns and variables

const VAR = /\$\{([A-Za-z0-9_.]+)\}/g;
const WHOLE = /^\$\{([A-Za-z0-9_.]+)\}$/;

function lookup(env, name) {
  if (!(name in env)) fail(`undefined variable \${${name}}`);
  return env[name];
}

function expand(v, env) {
  if (typeof v === 'string') {
    const m = WHOLE.exec(v);
    if (m) return lookup(env, m[1]);
    return v.replace(VAR, (_, n) => {
      const x = lookup(env, n);
      if (typeof x === 'string') return x;
      if (typeof x === 'number' || typeof x === 'boolean') return String(x);
      return JSON.stringify(x);
    });
  }
  if (Array.isArray(v)) return v.map((x) => expand(x, env));
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, expand(x, env)]));
  return v;
}

function atPath(value, path) {
  let cur = value;
  for (const part of path.split('.')) {
    if (Array.isArray(cur) && /^\d+$/.test(part) && Number(part) < cur.length) cur = cur[Number(part)];
    else if (cur && typeof cur === 'object' && !Array.isArray(cur) && part in cur) cur = cur[part];
    else fail(`save: no ${path} in ${show(value)}`);
  }
  return cur;
}

const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

function deepEq(a, b) {
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => deepEq(x, b[i]));
  if (isObj(a)) {
    if (!isObj(b)) return false;
    const ka = Object.keys(a).sort(); const kb = Object.keys(b).sort();
    return deepEq(ka, kb) && ka.every((k) => deepEq(a[k], b[k]));
  }
  return a === b;
}

const TYPES = {
  string: (v) => typeof v === 'string',
  number: (v) => typeof v === 'number',
  integer: (v) => Number.isInteger(v),
  boolean: (v) => typeof v === 'boolean',
  object: isObj,
  array: Array.isArray,
  null: (v) => v === null,
};

function match(pattern, actual, where = '$') {
  if (isObj(pattern)) {
    const keys = Object.keys(pattern);
    if (keys.length === 1 && keys[0].startsWith('$')) {
      const op = keys[0]; const arg = pattern[op];
      const ops = {
        $type: () => TYPES[arg](actual),
        $regex: () => typeof actual === 'string' && new RegExp(arg).test(actual),
        $gte: () => typeof actual === 'number' && actual >= arg,
        $lte: () => typeof actual === 'number' && actual <= arg,
        $len: () => (Array.isArray(actual) && actual.length === arg) ||
          (typeof actual === 'string' && Buffer.byteLength(actual) === arg),
        $eq: () => deepEq(arg, actual),
        $not_eq: () => !deepEq(arg, actual),
        $absent: () => actual === null || actual === undefined,
      };
      if (!ops[op]) fail(`unknown operator ${op}`);
      return ops[op]() ? null : `${where}: ${show(actual)} does not satisfy ${show(pattern)}`;
    }
    if (!isObj(actual)) return `${where}: expected an object, got ${show(actual)}`;
    for (const [k, p] of Object.entries(pattern)) {
      if (isObj(p) && p.$absent === true && Object.keys(p).length === 1) {
        if (actual[k] !== undefined && actual[k] !== null) return `${where}.${k}: expected absent, got ${show(actual[k])}`;
        continue;
      }
      if (!(k in actual) || actual[k] === undefined) return `${where}.${k}: missing (have ${Object.keys(actual).join(', ')})`;
      const d = match(p, actual[k], `${where}.${k}`);
      if (d) return d;
    }
    return null;
  }
  if (Array.isArray(pattern)) {
    if (!Array.isArray(actual) || actual.length !== pattern.length) {
      return `${where}: expected an array of ${pattern.length}, got ${show(actual)}`;
    }
    for (let i = 0; i < pattern.length; i++) {
      const d = match(pattern[i], actual[i], `${where}[${i}]`);
      if (d) return d;
    }
    return null;
  }
  return deepEq(pattern, actual) ? null : `${where}: expected ${show(pattern)}, got ${show(actual)}`;
}

// ---------------------------------------------------------------- ops

class Retryable extends Error {}
class Final extends Error {}

const pick = (a, names) => Object.fromEntries(names.filter((n) => n in a).map((n) => [n, a[n]]));
const claimOpts = (a) => {
  const o = pick(a, ['request', 'fingerprint', 'subject', 'wait']);
  if ('if_match' in a) o.ifMatch = a.if_match;
  return o;
};
const outcomeOf = (a) => {
  const o = { status: a.status ?? 200 };
  if ('body' in a) o.body = a.body;
  if ('headers' in a) o.headers = a.headers;
  if ('body_base64' in a) o.content = Buffer.from(a.body_base64, 'base64');
  return o;
};
const lease = (a) => ('lease_seconds' in a ? { leaseSeconds: a.lease_seconds } : {});
const ttl = (a) => ('ttl_seconds' in a ? { ttlSeconds: a.ttl_seconds } : {});
const data = (a) => ('data' in a ? [a.data] : []);

function handlerFor(spec = {}, calls) {
  return async () => {
    calls.push(1);
    if (spec.fail === 'release') throw new Retryable('conformance: retryable failure');
    if (spec.fail === 'final') throw new Final('conformance: final failure');
    return new Outcome(spec.status ?? 200, spec.body ?? null, spec.headers);
  };
}

async function runOp(c, op, a) {
  switch (op) {
    case 'sleep': await new Promise((r) => setTimeout(r, a.ms)); return null;
    case 'put_operation': { const { name, ...policy } = a; return c.putOperation(name, policy); }
    case 'get_operation': return c.getOperation(a.name);
    case 'list_operations': return { operations: await c.listOperations() };
    case 'issue': return c.issue(a.operation, a.subject, ttl(a));
    case 'issue_many': return { tokens: await c.issueMany(a.operation, a.subject, a.count, ttl(a)) };
    case 'introspect': return c.introspect(a.token);
    case 'revoke': await c.revoke(a.token); return null;
    case 'claim_token': return c.claimToken(a.token, claimOpts(a));
    case 'complete_token': return c.completeToken(a.token, a.attempt, outcomeOf(a));
    case 'release_token': return c.releaseToken(a.token, a.attempt);
    case 'extend_token': return c.extendToken(a.token, a.attempt, lease(a));
    case 'checkpoint_token': return c.checkpointToken(a.token, a.attempt, a.phase, ...data(a));
    case 'claim_key': return c.claimKey(a.operation, a.key, claimOpts(a));
    case 'scoped_key': return { key: scopedKey(a.key, a.headers, a.scope_headers ?? ['authorization', 'cookie']) };
    case 'complete_key': return c.completeKey(a.operation, a.key, a.attempt, outcomeOf(a));
    case 'release_key': return c.releaseKey(a.operation, a.key, a.attempt);
    case 'extend_key': return c.extendKey(a.operation, a.key, a.attempt, lease(a));
    case 'checkpoint_key': return c.checkpointKey(a.operation, a.key, a.attempt, a.phase, ...data(a));
    case 'get_key': return c.getKey(a.operation, a.key);
    case 'claim_batch': return { items: await c.claimBatch(a.operation, a.items) };
    case 'complete_batch': return { items: await c.completeBatch(a.operation, a.items) };
    case 'get_version': return c.getVersion(a.key);
    case 'bump_version': return { version: await c.bumpVersion(a.key, a.if_match) };
    case 'get_record': return c.getRecord(a.id);
    case 'record_events': return { events: await c.recordEvents(a.id) };
    case 'list_records': {
      const f = pick(a, ['operation', 'state', 'subject', 'limit', 'cursor']);
      if ('older_than' in a) f.olderThan = a.older_than;
      return c.listRecords(f);
    }
    case 'run_once': {
      const calls = [];
      const target = 'token' in a ? { token: a.token } : { operation: a.operation, key: a.key };
      const r = await c.runOnce(target, handlerFor(a.handler, calls),
        { ...pick(a, ['request', 'fingerprint', 'subject', 'wait']), releaseOn: (e) => e instanceof Retryable });
      return { ran: calls.length > 0, replayed: r.replayed, response: r.response };
    }
    case 'consume': {
      const failOn = {};
      for (const k of a.handler?.release ?? []) failOn[k] = 'release';
      for (const k of a.handler?.final ?? []) failOn[k] = 'final';
      const handled = [];
      const opts = {
        key: (m) => m.key,
        handler: async (m) => {
          handled.push(m.key);
          if (failOn[m.key] === 'release') throw new Retryable('conformance: retryable failure');
          if (failOn[m.key] === 'final') throw new Final('conformance: final failure');
          return new Outcome(200, { handled: m.key });
        },
        releaseOn: (e) => e instanceof Retryable,
      };
      if (a.messages.some((m) => 'request' in m)) opts.request = (m) => m.request ?? null;
      const outs = await c.consume(a.operation, a.messages, opts);
      return {
        handled: [...handled].sort(),
        outcomes: outs.map((o) => {
          const row = { key: o.key, outcome: o.outcome, retry: !!o.retry, status: o.status ?? null, code: o.code ?? null };
          if (o.response != null) row.response = o.response;
          return row;
        }),
      };
    }
    default: fail(`unknown op ${op}`);
  }
}

// ---------------------------------------------------------------- the runner

function checkError(p, err) {
  if (p.handler) return err instanceof Retryable || err instanceof Final ? null : `expected the handler's own error, got ${err}`;
  if (!(err instanceof IdemdError) || err instanceof TransportError) return `expected an IdemdError, got ${err?.stack ?? err}`;
  if ('code' in p) {
    if (p.code === null) {
      if (err.code !== null || err.constructor !== IdemdError) return `expected a non-problem IdemdError, got ${err}`;
    } else {
      const Cls = errorClasses[p.code];
      if (!Cls) return `the client has no error class for ${p.code}`;
      if (!(err instanceof Cls) || err.code !== p.code) return `expected ${Cls.name} (${p.code}), got ${err.name}: ${err.message}`;
    }
  }
  if ('status' in p && err.status !== p.status) return `expected status ${p.status}, got ${err.status} (${err.message})`;
  if ('retry_after' in p && err.retryAfter !== p.retry_after) return `expected retry_after ${p.retry_after}, got ${err.retryAfter}`;
  if ('problem' in p) {
    const r = match(p.problem, err.problem, '$.error.problem');
    if (r) return r;
  }
  if ('current_version' in p && err.currentVersion !== p.current_version) {
    return `expected current_version ${p.current_version}, got ${err.currentVersion}`;
  }
  return null;
}

async function runScenario(file) {
  const sc = JSON.parse(readFileSync(join(dir, file), 'utf8'));
  unknown(sc, SCENARIO_FIELDS, 'scenario');
  if (sc.name !== file.slice(0, -5)) fail(`name ${sc.name} is not the file's name`);
  const env = { run: 'c' + randomBytes(6).toString('hex'), run_long_key: 'k'.repeat(256), run_max_key: 'k'.repeat(255) };
  const configs = { default: {}, ...(sc.clients ?? {}) };
  let stub = null;
  const clients = {};
  for (const [name, cfg] of Object.entries(configs)) {
    unknown(cfg, CLIENT_FIELDS, `client ${name}`);
    const server = cfg.server ?? 'main';
    if (server === 'stub' && !stub) stub = await startStub();
    const baseUrl = server === 'stub' ? stub.url : { main: process.env.IDEMD_URL, limited: process.env.IDEMD_LIMITED_URL }[server];
    let apiKey = cfg.api_key ?? 'acme';
    apiKey = isObj(apiKey) ? apiKey.literal
      : { acme: process.env.IDEMD_API_KEY, globex: process.env.IDEMD_API_KEY_2, none: undefined }[apiKey];
    const r = { attempts: 3, base_delay_ms: 10, max_delay_ms: 100, ...(cfg.retry ?? {}) };
    clients[name] = {
      client: new Client({ baseUrl, apiKey, retry: { attempts: r.attempts, baseDelayMs: r.base_delay_ms, maxDelayMs: r.max_delay_ms } }),
      isStub: server === 'stub',
    };
  }
  const background = new Map();
  try {
    for (const [i, step] of sc.steps.entries()) {
      const where = `step ${i + 1} (${step.op ?? 'await ' + step.await})`;
      unknown(step, STEP_FIELDS, where);
      const expect = expand(step.expect ?? {}, env);
      unknown(expect, EXPECT_FIELDS, `${where} expect`);
      let outcome; let t0; let isStub;
      if ('await' in step) {
        const bg = background.get(step.await) ?? fail(`${where}: no background call ${step.await}`);
        background.delete(step.await);
        ({ t0, isStub } = bg);
        outcome = await bg.promise;
      } else {
        const cl = clients[step.client ?? 'default'] ?? fail(`${where}: no client ${step.client}`);
        isStub = cl.isStub;
        const args = expand(step.args ?? {}, env);
        if (isStub) stub.arm(expand(step.stub, env));
        else if ('stub' in step) fail(`${where}: stub answers for a client that is not on the stub`);
        t0 = performance.now();
        const promise = (async () => {
          try { return { ok: true, value: await runOp(cl.client, step.op, args), t: performance.now() }; } catch (e) {
            if (e instanceof ScenarioError) throw e;
            return { ok: false, value: e, t: performance.now() };
          }
        })();
        if ('background' in step) {
          promise.catch(() => {});
          background.set(step.background, { promise, t0, isStub });
          continue;
        }
        outcome = await promise;
      }
      const elapsed = outcome.t - t0;
      const taken = isStub ? [...stub.requests] : null;
      if ('error' in expect) {
        if (outcome.ok) fail(`${where}: expected an error ${show(expect.error)}, got result ${show(outcome.value)}`);
        const d = checkError(expect.error, outcome.value);
        if (d) fail(`${where}: ${d}`);
      } else {
        if (!outcome.ok) fail(`${where}: unexpected error ${outcome.value?.stack ?? outcome.value}`);
        const result = outcome.value === undefined ? null : JSON.parse(JSON.stringify(outcome.value));
        if ('result' in expect) {
          const d = match(expect.result, result);
          if (d) fail(`${where}: result ${show(result)}\n  ${d}`);
        }
        for (const [v, p] of Object.entries(step.save ?? {})) env[v] = atPath(result, p);
      }
      if ('requests' in expect || 'sent' in expect) {
        if (!taken) fail(`${where}: requests/sent need a stub client`);
        if ('requests' in expect && taken.length !== expect.requests) {
          fail(`${where}: expected ${expect.requests} requests, the stub got ${taken.length}: ${taken.map((r) => r.method + ' ' + r.path).join(', ')}`);
        }
        for (const [j, p] of (expect.sent ?? []).entries()) {
          if (j >= taken.length) fail(`${where}: request ${j + 1} was not sent`);
          const d = match(p, taken[j], `request[${j}]`);
          if (d) fail(`${where}: ${d}`);
        }
      }
      if ('min_elapsed_ms' in expect && elapsed < expect.min_elapsed_ms) fail(`${where}: took ${elapsed.toFixed(0)} ms, expected at least ${expect.min_elapsed_ms}`);
      if ('max_elapsed_ms' in expect && elapsed > expect.max_elapsed_ms) fail(`${where}: took ${elapsed.toFixed(0)} ms, expected at most ${expect.max_elapsed_ms}`);
    }
    if (background.size) fail(`background calls never awaited: ${[...background.keys()].join(', ')}`);
  } finally {
    if (stub) await stub.close();
  }
}

test('conformance scenarios found', () => {
  assert.ok(files.length >= 5, `no scenarios in ${dir}`);
});

for (const file of files) {
  test(`conformance: ${file.slice(0, -5)}`, { timeout: 120000 }, () => runScenario(file));
}
