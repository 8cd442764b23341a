// Compiled by tsc --noEmit only (never run): uses the package's public types
// as an application would, so that a wrong declaration fails the check.
import {
  Client, Outcome, IdemdError, LeaseLostError, VersionMismatchError, errorClasses,
  type Claimed, type MessageOutcome, type StoredResponse, type ExtendResult, type CheckpointResult,
  type IdemdRecord, type RecordEvent, type RecordPage,
} from 'idemd';
import idempotent, { storableHeaders, type IdempotentRequest } from 'idemd/express';
import { submitWithToken, IdemdSubmitError, type SubmitResult } from 'idemd/browser';

function use(...values: unknown[]): void { void values; }

async function main(): Promise<void> {
  const client = new Client({ baseUrl: 'http://127.0.0.1:8080', apiKey: 'idk_x', retry: { attempts: 3 } });
  const t = await client.issue('order.create', 'user-42', { ttlSeconds: 60 });
  const many = await client.issueMany('order.create', 'user-42', 3);
  const c: Claimed = await client.claimToken(t.token, { request: { a: 1 }, ifMatch: 7 });
  if (!c.replayed && c.attempt !== undefined) {
    await client.completeToken(t.token, c.attempt, { status: 201, body: { id: many.length } });
  }
  const k = await client.claimKey('order.create', 'evt_1', { subject: 'user-42', wait: 5 });
  const stored: StoredResponse | undefined = k.response;
  await client.releaseKey('order.create', 'evt_1', k.attempt ?? 1);
  const rec = await client.getKey('order.create', 'evt_1');
  const state: 'issued' | 'in_progress' | 'completed' = rec.state;
  const items = await client.claimBatch('order.create', [{ key: 'a' }, { key: 'b', request: [1] }]);
  await client.completeBatch('order.create', [
    { key: 'a', attempt: items[0].attempt ?? 1, outcome: new Outcome(201, { ok: true }) },
    { key: 'b', attempt: 1, status: 200, body_base64: 'b2s=' },
  ]);
  const v: number = await client.bumpVersion('orders:user-42', (await client.getVersion('orders:user-42')).version);
  await client.putOperation('order.create', { token_ttl_seconds: 60, retention_seconds: 60, lease_seconds: 5 });
  const ops = await client.listOperations();
  const r = await client.runOnce({ operation: 'order.create', key: 'k' }, async () => ({ id: 1 }),
    { releaseOn: (e) => !(e instanceof LeaseLostError) });
  if (!r.replayed) r.value.id.toFixed();
  await client.runOnce({ token: t.token }, () => new Outcome(204));
  const out: MessageOutcome<{ id: string }>[] = await client.consume('order.create', [{ id: 'e1' }],
    { key: (m) => m.id, handler: async (m) => m.id.length, concurrency: 2 });
  await client.consume('order.create', ['e2'], {
    key: (m) => m,
    handler: async (m, claim) => {
      await client.checkpointKey('order.create', claim.key, claim.attempt ?? 1, 'charged', { m });
      return claim.id ?? '';
    },
  });
  const ext: ExtendResult = await client.extendKey('order.create', 'k', 1, { leaseSeconds: 30 });
  await client.extendToken(t.token, 1);
  const cp: CheckpointResult = await client.checkpointToken(t.token, 1, 'p');
  const cpPhase: string | undefined = rec.checkpoint?.phase;
  const record: IdemdRecord = await client.getRecord(t.id);
  const replays: number | undefined = record.replays;
  const events: RecordEvent[] = await client.recordEvents(t.id);
  const page: RecordPage = await client.listRecords({ operation: 'order.create', state: 'in_progress', olderThan: 600, limit: 50 });
  const next: string | null = page.next_cursor;
  await client.listRecords({ cursor: next });
  for await (const row of client.iterRecords({ subject: 'user-42', pageSize: 100 })) use(row.claimed_at);
  use(ext.lease_expires_at, cp.checkpoint.data, cpPhase, replays, events[0]?.event);
  if (out[0].retry && out[0].outcome === 'failed') throw out[0].error;
  try {
    await client.health();
  } catch (e) {
    if (e instanceof VersionMismatchError) use(e.currentVersion, e.status, e.code, e.retryAfter);
    if (e instanceof IdemdError && e.code === errorClasses.lease_lost.code) use(e.detail);
  }
  const mw = idempotent(client, { operation: 'order.create', subject: (req: IdempotentRequest) => String(req.headers['x-user']) });
  idempotent(client, { by: 'token' });
  use(stored, state, v, ops, mw, storableHeaders({ 'set-cookie': ['a'], etag: '"1"' }));
}
void main;

// the browser helper, by its "./browser" export
async function submitOnce(token: string): Promise<boolean> {
  try {
    const r: SubmitResult = await submitWithToken({ url: '/orders', body: { sku: 'A-1' } }, { token, as: 'json' });
    return r.ok && !r.stale;
  } catch (e) {
    return !(e instanceof IdemdSubmitError);
  }
}
void submitOnce;
