// Long work and records against a real idemd: extend, checkpoint (tokens and
// caller keys), getRecord, recordEvents, listRecords with its cursor,
// iterRecords, and consume handing the handler its claim.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LeaseLostError, InvalidRequestError, RecordNotFoundError, IdemdError } from 'idemd';
import { client, newOperation, uniq } from './env.js';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('extend and checkpoint a caller key; a takeover gets the checkpoint; stale attempts are fenced', async () => {
  const c = client();
  const op = await newOperation(c);
  const key = uniq('k');
  const claim = await c.claimKey(op, key, { subject: 'u-1' });
  await sleep(1100);
  const ext = await c.extendKey(op, key, claim.attempt);
  assert.ok(Date.parse(ext.lease_expires_at) > Date.parse(claim.lease_expires_at));
  const short = await c.extendKey(op, key, claim.attempt, { leaseSeconds: 5 });
  assert.ok(Date.parse(short.lease_expires_at) < Date.parse(ext.lease_expires_at));
  const cp = await c.checkpointKey(op, key, claim.attempt, 'card.charged', { charge: 'ch_1' });
  assert.deepEqual(cp.checkpoint, { phase: 'card.charged', data: { charge: 'ch_1' }, attempt: 1 });
  assert.equal((await c.getKey(op, key)).checkpoint.phase, 'card.charged');
  await c.releaseKey(op, key, claim.attempt);
  const again = await c.claimKey(op, key, { subject: 'u-1' });
  assert.equal(again.attempt, 2);
  assert.deepEqual(again.checkpoint, { phase: 'card.charged', data: { charge: 'ch_1' }, attempt: 1 });
  await assert.rejects(c.checkpointKey(op, key, 1, 'late'), (e) => e instanceof LeaseLostError && e.status === 409);
  await assert.rejects(c.extendKey(op, key, 1), LeaseLostError);
  await assert.rejects(c.checkpointKey(op, key, 2, 'Not Valid!'), InvalidRequestError);
  await c.checkpointKey(op, key, 2, 'shipped');
  assert.deepEqual((await c.getKey(op, key)).checkpoint, { phase: 'shipped', data: null, attempt: 2 });
  await assert.rejects(c.extendKey(op, uniq('never'), 1), RecordNotFoundError);
});

test('extend and checkpoint a token', async () => {
  const c = client();
  const op = await newOperation(c);
  const { token } = await c.issue(op, 'u-2');
  const claim = await c.claimToken(token);
  assert.ok((await c.extendToken(token, claim.attempt, { leaseSeconds: 10 })).lease_expires_at);
  const cp = await c.checkpointToken(token, claim.attempt, 'step-1', [1, 2]);
  assert.equal(cp.state, 'in_progress');
  assert.deepEqual(cp.checkpoint.data, [1, 2]);
  assert.equal((await c.introspect(token)).checkpoint.phase, 'step-1');
  await c.completeToken(token, claim.attempt, { status: 201 });
  await assert.rejects(c.extendToken(token, claim.attempt),
    (e) => e instanceof IdemdError && e.status === 409);
});

test('getRecord and recordEvents', async () => {
  const c = client();
  const op = await newOperation(c);
  const key = uniq('k');
  const claim = await c.claimKey(op, key, { subject: 'u-3' });
  assert.match(claim.id, /^[0-9a-f]{32}$/);
  await c.checkpointKey(op, key, 1, 'half');
  await c.completeKey(op, key, 1, { status: 201, body: { done: 1 } });
  const rec = await c.getRecord(claim.id);
  assert.equal(rec.id, claim.id);
  assert.equal(rec.operation, op);
  assert.equal(rec.state, 'completed');
  assert.deepEqual(rec.response.body, { done: 1 });
  const events = await c.recordEvents(claim.id);
  assert.deepEqual(events.map((e) => e.event), ['claimed', 'checkpoint', 'completed']);
  assert.equal(events[1].phase, 'half');
  assert.equal(events[2].status, 201);
  assert.ok(events.every((e) => e.by.startsWith('api_key:')));
  await assert.rejects(c.getRecord('0'.repeat(32)), (e) => e instanceof RecordNotFoundError && e.status === 404);
  await assert.rejects(c.recordEvents('0'.repeat(32)), RecordNotFoundError);
});

test('listRecords pages with the cursor, newest first; iterRecords follows it', async () => {
  const c = client();
  const op = await newOperation(c);
  const ids = [];
  for (let i = 0; i < 7; i++) ids.push((await c.claimKey(op, `k-${i}`, { subject: 'lister two' })).id);
  await c.completeKey(op, 'k-0', 1);
  const first = await c.listRecords({ operation: op, limit: 3 });
  assert.equal(first.records.length, 3);
  assert.ok(first.next_cursor);
  const seen = [];
  let cursor = null;
  do {
    const page = await c.listRecords({ operation: op, limit: 3, cursor });
    seen.push(...page.records.map((r) => r.id));
    cursor = page.next_cursor;
  } while (cursor);
  assert.deepEqual(seen, [...ids].reverse());
  const all = [];
  for await (const r of c.iterRecords({ operation: op, pageSize: 2 })) all.push(r.id);
  assert.deepEqual(all, seen);
  const busy = [];
  for await (const r of c.iterRecords({ operation: op, state: 'in_progress', subject: 'lister two' })) busy.push(r.id);
  assert.equal(busy.length, 6);
  assert.ok(!busy.includes(ids[0]));
  assert.deepEqual((await c.listRecords({ operation: op, olderThan: 3600 })).records, []);
  await assert.rejects(c.listRecords({ limit: 0 }), InvalidRequestError);
  await assert.rejects(c.listRecords({ state: 'sleeping' }), InvalidRequestError);
});

test('consume hands the handler its claim (record id and attempt)', async () => {
  const c = client();
  const op = await newOperation(c);
  const seen = new Map();
  const out = await c.consume(op, [{ id: 'm-1' }, { id: 'm-2' }], {
    key: (m) => m.id,
    handler: async (m, claim) => {
      seen.set(m.id, claim);
      await c.checkpointKey(op, claim.key, claim.attempt, 'effect.done');
      return { ok: m.id };
    },
  });
  assert.deepEqual(out.map((o) => o.outcome), ['processed', 'processed']);
  for (const [id, claim] of seen) {
    assert.equal(claim.key, id);
    assert.equal(claim.attempt, 1);
    assert.equal((await c.getRecord(claim.id)).state, 'completed');
  }
});
