import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import express from 'express';
import { idempotent, createIdempotent, scopedKey, storableHeaders, parseIdempotencyKey, requestIdentity }
  from 'idemd/express';
import { client, newOperation, uniq } from './env.js';

let server;
let base;
let op;
let tokenOp;
const calls = { orders: 0, flaky: 0, text: 0, token: 0 };

before(async () => {
  const c = client();
  op = await newOperation(c);
  tokenOp = await newOperation(c);
  const app = express();
  app.use(express.json());
  app.post('/orders', idempotent(c, { operation: op }), (req, res) => {
    calls.orders++;
    res.cookie('session', 'secret');
    res.set('Access-Control-Allow-Origin', 'https://shop.example');
    res.set('Location', `/orders/${calls.orders}`);
    res.status(201).json({ order: calls.orders, amount: req.body.amount });
  });
  app.post('/flaky', idempotent(c, { operation: op }), (req, res) => {
    calls.flaky++;
    if (calls.flaky === 1) throw new Error('boom');
    if (calls.flaky === 2) return res.status(503).json({ error: 'try later' });
    res.json({ ok: calls.flaky });
  });
  app.post('/text', idempotent(c, { operation: op }), (req, res) => {
    calls.text++;
    res.writeHead(202, { 'content-type': 'text/plain' });
    res.write('accepted ');
    res.end(String(calls.text));
  });
  app.post('/token', idempotent(c, { by: 'token' }), (req, res) => {
    calls.token++;
    res.status(201).json({ token_run: calls.token });
  });
  app.post('/slow', idempotent(c, { operation: op }), (req, res) => {
    setTimeout(() => res.json({ slow: true }), 700);
  });
  app.use((err, req, res, next) => { res.status(500).json({ error: err.message }); });
  await new Promise((resolve) => { server = app.listen(0, '127.0.0.1', resolve); });
  base = `http://127.0.0.1:${server.address().port}`;
  c.tokenIssue = () => c.issue(tokenOp, 'user-1');
  globalThis.idemdTestClient = c;
});

after(() => new Promise((resolve) => server.close(resolve)));

const post = (path, key, body = {}, extra = {}) => fetch(base + path, {
  method: 'POST',
  headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}), ...extra },
  body: JSON.stringify(body),
});

test('by caller key: the route runs once, duplicates get the stored answer', async () => {
  const key = uniq('k');
  const r1 = await post('/orders', key, { amount: 5 });
  assert.equal(r1.status, 201);
  assert.equal(r1.headers.get('idempotent-replayed'), 'false');
  assert.ok(r1.headers.get('set-cookie'));
  const b1 = await r1.json();
  const r2 = await post('/orders', `"${key}"`, { amount: 5 }); // sf-string form
  assert.equal(r2.status, 201);
  assert.equal(r2.headers.get('idempotent-replayed'), 'true');
  assert.equal(r2.headers.get('location'), `/orders/${b1.order}`);
  assert.equal(r2.headers.get('set-cookie'), null);
  assert.equal(r2.headers.get('access-control-allow-origin'), null);
  assert.match(r2.headers.get('content-type'), /^application\/json/);
  assert.deepEqual(await r2.json(), b1);
  assert.equal(calls.orders, 1);
  const stored = await globalThis.idemdTestClient.getKey(op, scopedKey(key, {}));
  assert.equal(stored.response.headers['set-cookie'], undefined);
  assert.equal(stored.response.headers['content-length'], undefined);
  const r3 = await post('/orders', key, { amount: 6 });
  assert.equal(r3.status, 422);
  const p3 = await r3.json();
  assert.equal(p3.code, 'fingerprint_mismatch');
  assert.equal(p3.title, 'Unprocessable Content'); // idemd's own problem, unchanged
  const r4 = await fetch(`${base}/orders`, {   // the same JSON meaning, other bytes
    method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: '{ "amount": 5 }',
  });
  assert.equal(r4.status, 201);
  assert.equal(r4.headers.get('idempotent-replayed'), 'true');
});

test('no key: 400 idempotency_key_missing; a bad key: 400 idempotency_key_invalid', async () => {
  const r = await post('/orders', null);
  assert.equal(r.status, 400);
  assert.equal(r.headers.get('content-type'), 'application/problem+json');
  const p = await r.json();
  assert.equal(p.code, 'idempotency_key_missing');
  assert.equal(p.title, 'Bad Request');
  const bad = await post('/orders', 'x'.repeat(300));
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).code, 'idempotency_key_invalid');
});

test('a thrown error or a 5xx releases; the retry runs the route again', async () => {
  const key = uniq('k');
  const r1 = await post('/flaky', key);
  assert.equal(r1.status, 500);
  assert.equal((await globalThis.idemdTestClient.getKey(op, scopedKey(key, {}))).state, 'issued');
  const r2 = await post('/flaky', key);
  assert.equal(r2.status, 503);
  const r3 = await post('/flaky', key);
  assert.equal(r3.status, 200);
  assert.deepEqual(await r3.json(), { ok: 3 });
  const r4 = await post('/flaky', key);
  assert.equal(r4.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(await r4.json(), { ok: 3 });
  assert.equal(calls.flaky, 3);
});

test('non-JSON bodies written with writeHead/write/end are stored as bytes', async () => {
  const key = uniq('k');
  const r1 = await post('/text', key);
  assert.equal(r1.status, 202);
  assert.equal(await r1.text(), 'accepted 1');
  const r2 = await post('/text', key);
  assert.equal(r2.status, 202);
  assert.equal(r2.headers.get('content-type'), 'text/plain');
  assert.equal(await r2.text(), 'accepted 1');
  assert.equal(calls.text, 1);
});

test('by token: the Idempotency-Key is an idemd token', async () => {
  const { token } = await globalThis.idemdTestClient.tokenIssue();
  const r1 = await post('/token', token);
  assert.equal(r1.status, 201);
  const r2 = await post('/token', token);
  assert.equal(r2.headers.get('idempotent-replayed'), 'true');
  assert.deepEqual(await r2.json(), { token_run: 1 });
  const bad = await post('/token', 'garbage!');
  assert.equal(bad.status, 400);
  assert.equal((await bad.json()).code, 'token_malformed');
});

test('a concurrent duplicate gets 409 request_in_progress with Retry-After', async () => {
  const key = uniq('k');
  const first = post('/slow', key);
  await new Promise((r) => setTimeout(r, 200));
  const dup = await post('/slow', key);
  assert.equal(dup.status, 409);
  assert.equal(dup.headers.get('retry-after'), '1');
  assert.equal((await dup.json()).code, 'request_in_progress');
  assert.equal((await first).status, 200);
});

test('storableHeaders and parseIdempotencyKey', () => {
  assert.deepEqual(storableHeaders({
    'Set-Cookie': ['a=1'], Connection: 'close, x-secret', 'x-secret': 'no', 'Keep-Alive': 'timeout=5',
    'Content-Length': '3', 'Access-Control-Allow-Origin': '*', 'Transfer-Encoding': 'chunked',
    ETag: '"1"', 'x-multi': ['a', 'b'],
  }), { etag: '"1"', 'x-multi': 'a, b' });
  assert.equal(parseIdempotencyKey('"a\\"b"'), 'a"b');
  assert.equal(parseIdempotencyKey(' k1 '), 'k1');
  assert.equal(parseIdempotencyKey(''), null);
  assert.equal(parseIdempotencyKey(undefined), null);
});

test('keys are scoped per caller: the same key from two callers is two records', async () => {
  const key = uniq('k');
  const before = calls.orders;
  const alice = { authorization: 'Bearer alice' };
  const a1 = await post('/orders', key, { amount: 5 }, alice);
  const a2 = await post('/orders', key, { amount: 5 }, alice);
  const b1 = await post('/orders', key, { amount: 5 }, { authorization: 'Bearer bob' });
  assert.deepEqual([a1.status, a2.headers.get('idempotent-replayed'), b1.headers.get('idempotent-replayed')],
    [201, 'true', 'false']);
  assert.equal(calls.orders, before + 2);
  const rec = await globalThis.idemdTestClient.getKey(op, scopedKey(key, alice));
  assert.equal(rec.state, 'completed');
});

test('a guarded operation: createIdempotent refuses without a subject, fills it with one', async () => {
  const c = client();
  const guarded = await newOperation(c, { version_key: 'orders:{subject}' });
  await assert.rejects(createIdempotent(c, { operation: guarded }), /pass subject/);
  const user = uniq('u');
  const mw = await createIdempotent(c, { operation: guarded, subject: (req) => req.params.user });
  const app = express();
  app.use(express.json());
  app.post('/users/:user/orders', (req, res, next) => mw(req, res, next), (req, res) => res.status(201).json({ ok: 1 }));
  const srv = app.listen(0);
  await new Promise((r) => srv.once('listening', r));
  try {
    const url = `http://127.0.0.1:${srv.address().port}/users/${user}/orders`;
    const h = { 'content-type': 'application/json', 'idempotency-key': 'k-1' };
    const r1 = await fetch(url, { method: 'POST', headers: h, body: '{}' });
    const r2 = await fetch(url, { method: 'POST', headers: h, body: '{}' });
    assert.deepEqual([r1.status, r2.headers.get('idempotent-replayed')], [201, 'true']);
    assert.equal((await c.getVersion(`orders:${user}`)).version, 1);
  } finally {
    srv.close();
  }
});

test('the request is method, path, query and body (parsed when JSON), as Go and Spring send it', async () => {
  const key = uniq('k');
  const r1 = await post('/orders?coupon=A', key, { amount: 5 });
  assert.equal(r1.status, 201);
  const r2 = await post('/orders?coupon=A', key, { amount: 5 });
  assert.equal(r2.headers.get('idempotent-replayed'), 'true');
  const other = await post('/orders?coupon=B', key, { amount: 5 }); // another query: another request
  assert.equal(other.status, 422);
  assert.equal((await other.json()).code, 'fingerprint_mismatch');
  const rec = await globalThis.idemdTestClient.getKey(op, scopedKey(key, {}));
  assert.equal(rec.state, 'completed');

  const id = (url, body, extra = {}) => requestIdentity({ method: 'POST', originalUrl: url, headers: {}, body, ...extra });
  assert.deepEqual(id('/o?b=1&a=2', { amount: 1 }, { _body: true }),
    { method: 'POST', path: '/o', query: 'b=1&a=2', json: { amount: 1 } });
  assert.deepEqual(id('/o', undefined), { method: 'POST', path: '/o', query: '', body: null });
  assert.deepEqual(id('/o', {}), { method: 'POST', path: '/o', query: '', body: null }); // express 4: nothing parsed
  assert.deepEqual(id('/o', {}, { _body: true }), { method: 'POST', path: '/o', query: '', json: {} });
  assert.deepEqual(id('/o', Buffer.from('{"a": [1, 2]}')), { method: 'POST', path: '/o', query: '', json: { a: [1, 2] } });
  assert.deepEqual(id('/o', 'plain text'), { method: 'POST', path: '/o', query: '', body: 'plain text' });
  assert.deepEqual(id('/o', Buffer.from([0xff, 0xfe])), { method: 'POST', path: '/o', query: '',
    body_sha256: createHash('sha256').update(Buffer.from([0xff, 0xfe])).digest('hex') });
});
