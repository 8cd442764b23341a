import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Outcome } from 'idemd';
import { client, newOperation, uniq } from './env.js';

class Declined extends Error {}

test('runOnce: runs once, duplicates get the stored response', async () => {
  const c = client();
  const op = await newOperation(c);
  const key = uniq('k');
  let calls = 0;
  const work = async () => { calls++; return new Outcome(201, { order: calls }); };
  const first = await c.runOnce({ operation: op, key }, work);
  const second = await c.runOnce({ operation: op, key }, work);
  assert.equal(calls, 1);
  assert.equal(first.replayed, false);
  assert.equal(second.replayed, true);
  assert.deepEqual(second.response, { status: 201, headers: {}, body: { order: 1 } });
  assert.deepEqual(first.response, second.response);
  const plain = await c.runOnce({ operation: op, key: uniq('k') }, () => [1, 2]);
  assert.deepEqual(plain.response, { status: 200, headers: {}, body: [1, 2] });
});

test('runOnce: an error releases (default) or is stored as final', async () => {
  const c = client();
  const op = await newOperation(c);
  const key = uniq('k');
  await assert.rejects(c.runOnce({ operation: op, key }, () => { throw new Error('flaky'); }), /flaky/);
  assert.equal((await c.getKey(op, key)).state, 'issued');
  const r = await c.runOnce({ operation: op, key }, (claim) => ({ attempt: claim.attempt }));
  assert.deepEqual(r.response.body, { attempt: 2 });
  const final = uniq('k');
  const releaseOn = (e) => !(e instanceof Declined);
  await assert.rejects(c.runOnce({ operation: op, key: final }, () => { throw new Declined('no'); }, { releaseOn }), Declined);
  const rec = await c.getKey(op, final);
  assert.equal(rec.state, 'completed');
  assert.deepEqual(rec.response.body, { error: 'Declined' });
});

test('runOnce: token form', async () => {
  const c = client();
  const op = await newOperation(c);
  const token = (await c.issue(op, 'u')).token;
  const a = await c.runOnce({ token }, () => ({ id: 7 }), { request: { x: 1 } });
  const b = await c.runOnce({ token }, () => ({ id: 8 }), { request: { x: 1 } });
  assert.equal(a.replayed, false);
  assert.equal(b.replayed, true);
  assert.deepEqual(b.response.body, { id: 7 });
});

test('batch claim and batch complete', async () => {
  const c = client();
  const op = await newOperation(c);
  const [fresh, done, busy] = [uniq('k'), uniq('k'), uniq('k')];
  await c.claimKey(op, done);
  await c.completeKey(op, done, 1, { status: 201, body: { n: 0 } });
  await c.claimKey(op, busy);
  const res = await c.claimBatch(op, [{ key: fresh, request: { x: 1 } }, { key: done }, { key: busy }, { key: 'bad key' }]);
  assert.deepEqual(res.map((r) => [r.key, r.status, r.code ?? null]),
    [[fresh, 201, null], [done, 200, null], [busy, 409, 'request_in_progress'], ['bad key', 400, 'idempotency_key_invalid']]);
  assert.equal(res[0].attempt, 1);
  assert.deepEqual(res[1].response.body, { n: 0 });
  const out = await c.completeBatch(op, [
    { key: fresh, attempt: 1, outcome: { status: 201, body: { n: 1 } } },
    { key: busy, attempt: 9, status: 200 },
  ]);
  assert.deepEqual(out.map((r) => [r.status, r.code ?? null]), [[200, null], [409, 'lease_lost']]);
});

test('consume: handler only for new messages, one batch claim and completion', async () => {
  const c = client();
  const op = await newOperation(c);
  const ids = [uniq('evt'), uniq('evt'), uniq('evt'), uniq('evt')];
  await c.claimKey(op, ids[1]);
  await c.completeKey(op, ids[1], 1, { status: 200, body: { before: true } });
  await c.claimKey(op, ids[2]);
  const messages = [{ id: ids[0] }, { id: ids[1] }, { id: ids[2] }, { id: ids[3], fail: true }, { id: ids[0] }];
  const handled = [];
  const handler = async (m) => {
    handled.push(m.id);
    if (m.fail) throw new Error('transient');
    return { handled: m.id };
  };
  const out = await c.consume(op, messages, { key: (m) => m.id, handler });
  assert.deepEqual(handled.sort(), [ids[0], ids[3]].sort());
  assert.deepEqual(out.map((o) => o.outcome), ['processed', 'replayed', 'in_progress', 'failed', 'processed']);
  assert.deepEqual(out.map((o) => o.retry), [false, false, true, true, false]);
  assert.deepEqual(out[1].response.body, { before: true });
  assert.equal((await c.getKey(op, ids[3])).state, 'issued');
  assert.deepEqual((await c.getKey(op, ids[0])).response.body, { handled: ids[0] });
  messages[3].fail = false;
  handled.length = 0;
  const again = await c.consume(op, messages.slice(0, 4), { key: (m) => m.id, handler });
  assert.deepEqual(handled, [ids[3]]);
  assert.deepEqual(again.map((o) => o.outcome), ['replayed', 'replayed', 'in_progress', 'processed']);
});

test('idemd/browser: the page-side helper is the package\'s "./browser" export', async () => {
  const b = await import('idemd/browser');
  assert.equal(typeof b.submitWithToken, 'function');
  assert.deepEqual([...b.DEFAULT_RETRY_ON], [409, 429, 502, 503, 504]);
  assert.equal(b.parseRetryAfter('3', 0), 3000);
});
