// Tests of clients/node/src/browser.js (idemd/browser) in node (no browser): its retry logic against
// a scripted HTTP server standing in for idemd's gateway. The form-specific
// parts (disabling the button, reading the fields) are tested in Chromium by
// checkout.test.mjs.
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { after, before, beforeEach, describe, test } from 'node:test';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const src = process.env.IDEMD_SOURCE_DIR || path.resolve(here, '..', '..');
const idemd = await import(pathToFileURL(path.join(src, 'clients', 'node', 'src', 'browser.js')).href);
const { submitWithToken, IdemdSubmitError, parseRetryAfter, backoffDelay, DEFAULT_RETRY_ON } = idemd;

const TOKEN = 'AQEBAAAAAQAAAAEAAAB2c2LkQ0Rj7y1hYdW0V3nGZmFoZQ';

// The server answers each request with the next step of `script`:
// a function (req, res, body) or 'drop' (destroy the socket unanswered).
let script = [];
let seen = [];
let server;
let base;

function json(res, status, body, headers = {}) {
  const data = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data), ...headers });
  res.end(data);
}

function problem(res, status, code, headers = {}) {
  const data = JSON.stringify({ type: `https://idemd.dev/problems/${code}`, title: code, status, detail: code, code });
  res.writeHead(status, { 'Content-Type': 'application/problem+json', 'Content-Length': Buffer.byteLength(data), ...headers });
  res.end(data);
}

const created = (res) => json(res, 201, { order_id: 7 }, { 'Idempotent-Replayed': 'false' });
const replay = (res) => json(res, 201, { order_id: 7 }, { 'Idempotent-Replayed': 'true' });
const inProgress = (res) => problem(res, 409, 'request_in_progress', { 'Retry-After': '1' });

before(async () => {
  server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      seen.push({ method: req.method, url: req.url, headers: req.headers, body });
      const step = script.shift();
      if (step === undefined) { problem(res, 500, 'script_exhausted'); return; }
      if (step === 'drop') { req.socket.destroy(); return; }
      if (step === 'hang') return; // never answers (closed when the client gives up)
      step(res, req, body);
    });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(() => new Promise((r) => { server.closeAllConnections(); server.close(r); }));

beforeEach(() => { script = []; seen = []; });

// Records the waits instead of sleeping; jitter pinned to its maximum.
function fakeTime() {
  const waits = [];
  return { waits, sleep: async (ms) => { waits.push(ms); }, random: () => 1 };
}

describe('submitWithToken (request object)', () => {
  test('sends the token in Idempotency-Key and the body as JSON', async () => {
    script = [created];
    const r = await submitWithToken({ url: `${base}/orders`, body: { name: 'Ada', quantity: 1 } }, { token: TOKEN });
    assert.equal(r.ok, true);
    assert.equal(r.status, 201);
    assert.equal(r.replayed, false);
    assert.equal(r.attempts, 1);
    assert.deepEqual(r.body, { order_id: 7 });
    assert.equal(seen.length, 1);
    assert.equal(seen[0].method, 'POST');
    assert.equal(seen[0].headers['idempotency-key'], `"${TOKEN}"`);
    assert.equal(seen[0].headers.prefer, 'wait=10');
    assert.equal(seen[0].headers['content-type'], 'application/json');
    assert.equal(seen[0].body.toString(), '{"name":"Ada","quantity":1}');
  });

  test('retries a network failure with the same token and the same bytes', async () => {
    script = ['drop', 'drop', created];
    const t = fakeTime();
    const retries = [];
    const r = await submitWithToken({ url: `${base}/orders`, body: { a: 1 } },
      { token: TOKEN, ...t, onRetry: (i) => retries.push(i) });
    assert.equal(r.status, 201);
    assert.equal(r.attempts, 3);
    assert.equal(seen.length, 3);
    for (const s of seen) {
      assert.equal(s.headers['idempotency-key'], `"${TOKEN}"`);
      assert.equal(s.body.toString(), '{"a":1}');
    }
    assert.equal(retries.length, 2);
    assert.equal(retries[0].status, null);
    assert.ok(retries[0].error, 'the network error is reported');
    // exponential: 250 then 500 (jitter pinned to the maximum)
    assert.deepEqual(t.waits, [250, 500]);
  });

  test('409 request_in_progress: waits Retry-After, then a replay is a success', async () => {
    script = [inProgress, replay];
    const t = fakeTime();
    let replayed = null;
    const r = await submitWithToken({ url: `${base}/orders`, body: 'x' },
      { token: TOKEN, ...t, onReplay: (res) => { replayed = res; } });
    assert.equal(r.ok, true);
    assert.equal(r.replayed, true);
    assert.equal(r.attempts, 2);
    assert.equal(replayed, r, 'onReplay gets the result');
    assert.deepEqual(t.waits, [1000], 'Retry-After: 1 is honoured over the 250 ms backoff');
  });

  test('503 with Retry-After, then 201', async () => {
    script = [(res) => problem(res, 503, 'unavailable', { 'Retry-After': '2' }), created];
    const t = fakeTime();
    const r = await submitWithToken({ url: `${base}/orders` }, { token: TOKEN, ...t });
    assert.equal(r.status, 201);
    assert.deepEqual(t.waits, [2000]);
  });

  test('gives up after `retries` retries with IdemdSubmitError holding the last answer', async () => {
    script = Array(4).fill((res) => problem(res, 503, 'unavailable'));
    const t = fakeTime();
    await assert.rejects(
      submitWithToken({ url: `${base}/orders` }, { token: TOKEN, retries: 3, backoffMs: 100, maxBackoffMs: 300, ...t }),
      (e) => {
        assert.ok(e instanceof IdemdSubmitError);
        assert.equal(e.attempts, 4);
        assert.equal(e.result.status, 503);
        assert.equal(e.result.problem.code, 'unavailable');
        return true;
      });
    assert.equal(seen.length, 4);
    assert.deepEqual(t.waits, [100, 200, 300], 'doubling, capped at maxBackoffMs');
  });

  test('412 goes to onStale once, without a retry', async () => {
    script = [(res) => problem(res, 412, 'version_mismatch', { ETag: '"3"' })];
    let stale = 0;
    const r = await submitWithToken({ url: `${base}/orders` }, { token: TOKEN, onStale: () => { stale++; } });
    assert.equal(r.stale, true);
    assert.equal(r.ok, false);
    assert.equal(r.problem.code, 'version_mismatch');
    assert.equal(stale, 1);
    assert.equal(seen.length, 1);
  });

  test('final 4xx answers are returned, not retried', async () => {
    for (const [status, code] of [[400, 'token_malformed'], [403, 'token_invalid'], [410, 'token_expired'], [422, 'fingerprint_mismatch']]) {
      script = [(res) => problem(res, status, code)];
      seen = [];
      const r = await submitWithToken({ url: `${base}/orders` }, { token: TOKEN });
      assert.equal(r.status, status);
      assert.equal(r.problem.code, code);
      assert.equal(seen.length, 1, `${status} is not retried`);
    }
  });

  test("an upstream's stored 409 (Idempotent-Replayed present) is final", async () => {
    script = [(res) => json(res, 409, { error: 'out of stock' }, { 'Idempotent-Replayed': 'false' })];
    const r = await submitWithToken({ url: `${base}/orders` }, { token: TOKEN });
    assert.equal(r.status, 409);
    assert.equal(r.stored, true);
    assert.equal(seen.length, 1);
  });

  test('502 and 504 from the gateway (claim released) are retried', async () => {
    script = [(res) => problem(res, 502, 'upstream_unavailable'), (res) => problem(res, 504, 'upstream_timeout'), created];
    const t = fakeTime();
    const r = await submitWithToken({ url: `${base}/orders` }, { token: TOKEN, ...t });
    assert.equal(r.status, 201);
    assert.equal(seen.length, 3);
  });

  test('a timed-out attempt is retried', async () => {
    script = ['hang', created];
    const t = fakeTime();
    const r = await submitWithToken({ url: `${base}/orders` }, { token: TOKEN, timeoutMs: 200, ...t });
    assert.equal(r.status, 201);
    assert.equal(r.attempts, 2);
  });

  test('multipart bodies are serialised once: every attempt sends the same bytes', async () => {
    script = ['drop', created];
    const fd = new FormData();
    fd.append('name', 'Ada');
    fd.append('note', 'x'.repeat(100));
    const r = await submitWithToken({ url: `${base}/orders`, body: fd }, { token: TOKEN, ...fakeTime() });
    assert.equal(r.status, 201);
    assert.equal(seen.length, 2);
    assert.match(seen[0].headers['content-type'], /^multipart\/form-data; ?boundary=/);
    assert.equal(seen[1].headers['content-type'], seen[0].headers['content-type']);
    assert.ok(seen[0].body.equals(seen[1].body), 'same multipart bytes, same boundary');
  });

  test('URLSearchParams bodies are sent urlencoded', async () => {
    script = [created];
    await submitWithToken({ url: `${base}/orders`, body: new URLSearchParams({ a: '1 2', b: 'é' }) }, { token: TOKEN });
    assert.match(seen[0].headers['content-type'], /^application\/x-www-form-urlencoded/);
    assert.equal(seen[0].body.toString(), 'a=1+2&b=%C3%A9');
  });

  test('an aborted signal stops the retries', async () => {
    script = [inProgress, inProgress, inProgress];
    const ctl = new AbortController();
    const p = submitWithToken({ url: `${base}/orders` }, {
      token: TOKEN, signal: ctl.signal, backoffMs: 10000, onRetry: () => ctl.abort(),
    });
    await assert.rejects(p, (e) => e instanceof IdemdSubmitError && e.aborted === true);
    assert.equal(seen.length, 1);
  });

  test('a missing token is a TypeError, nothing is sent', async () => {
    await assert.rejects(submitWithToken({ url: `${base}/orders` }, {}), TypeError);
    assert.equal(seen.length, 0);
  });

  test('waitSeconds sets Prefer: wait, 0 leaves it out', async () => {
    script = [created, created];
    await submitWithToken({ url: `${base}/orders`, body: {} }, { token: TOKEN, waitSeconds: 3 });
    await submitWithToken({ url: `${base}/orders`, body: {} }, { token: TOKEN, waitSeconds: 0 });
    assert.equal(seen[0].headers.prefer, 'wait=3');
    assert.equal(seen[1].headers.prefer, undefined);
  });

  test('a custom fetch is used', async () => {
    const calls = [];
    const r = await submitWithToken({ url: 'http://example.invalid/orders', method: 'put' }, {
      token: TOKEN,
      fetch: async (url, init) => { calls.push([url, init.method, init.headers.get('Idempotency-Key')]); return new Response('{}', { status: 200, headers: { 'Content-Type': 'application/json' } }); },
    });
    assert.equal(r.status, 200);
    assert.deepEqual(calls, [['http://example.invalid/orders', 'PUT', `"${TOKEN}"`]]);
  });
});

describe('helpers', () => {
  test('parseRetryAfter', () => {
    assert.equal(parseRetryAfter(null), null);
    assert.equal(parseRetryAfter('3'), 3000);
    assert.equal(parseRetryAfter(' 0 '), 0);
    assert.equal(parseRetryAfter('soon'), null);
    const now = Date.parse('2025-06-01T12:00:00Z');
    assert.equal(parseRetryAfter('Sun, 01 Jun 2025 12:00:05 GMT', now), 5000);
    assert.equal(parseRetryAfter('Sun, 01 Jun 2025 11:00:00 GMT', now), 0);
  });

  test('backoffDelay: exponential, capped, jittered between half and all', () => {
    assert.equal(backoffDelay(1, 250, 8000, () => 1), 250);
    assert.equal(backoffDelay(1, 250, 8000, () => 0), 125);
    assert.equal(backoffDelay(3, 250, 8000, () => 1), 1000);
    assert.equal(backoffDelay(10, 250, 8000, () => 1), 8000);
    for (let i = 0; i < 100; i++) {
      const d = backoffDelay(4, 250, 8000);
      assert.ok(d >= 1000 && d <= 2000, `${d} within [1000, 2000]`);
    }
  });

  test('the default retried statuses', () => {
    assert.deepEqual([...DEFAULT_RETRY_ON], [409, 429, 502, 503, 504]);
  });
});
