// The bench's peer: what a Node service does when it takes the IETF
// Idempotency-Key draft from a library: @node-idempotency/core with its
// Redis storage adapter, in front of a trivial create-order handler.
// The package family ships an adapter for NestJS only, so the core's
// onRequest/onResponse are called around the handler here, as its
// framework adapters do. The stored answer is written before the reply
// goes out, so a duplicate sent after the reply always finds it.
//   node server.js PORT REDIS_PORT
'use strict';
const http = require('http');
const { Idempotency, IdempotencyError, IdempotencyErrorCodes } = require('@node-idempotency/core');
const { RedisStorageAdapter } = require('@node-idempotency/storage-adapter-redis');

const port = Number(process.argv[2]);
const redisPort = Number(process.argv[3]);
const storage = new RedisStorageAdapter({ url: `redis://127.0.0.1:${redisPort}` });
// IETF draft: the key is required on this route; a concurrent duplicate gets
// 409 at once (the library's default: no waiting)
const idem = new Idempotency(storage, { enforceIdempotency: true, cacheTTLMS: 24 * 3600 * 1000 });
let nextOrder = 1;

function send(res, status, obj, replayed) {
  const body = JSON.stringify(obj);
  const h = { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) };
  if (replayed !== undefined) h['Idempotent-Replayed'] = replayed ? 'true' : 'false';
  res.writeHead(status, h);
  res.end(body);
}

const errorStatus = {
  [IdempotencyErrorCodes.IDEMPOTENCY_KEY_MISSING]: 400,
  [IdempotencyErrorCodes.IDEMPOTENCY_KEY_LEN_EXEEDED]: 400,
  [IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH]: 422,
  [IdempotencyErrorCodes.REQUEST_IN_PROGRESS]: 409,
};

async function createOrder(req, res, raw) {
  let body;
  try {
    body = raw.length ? JSON.parse(raw) : undefined;
  } catch (e) {
    return send(res, 400, { error: 'invalid JSON' });
  }
  const ireq = { headers: req.headers, path: req.url, method: req.method, body };
  try {
    const stored = await idem.onRequest(ireq);
    if (stored) return send(res, stored.additional.status, stored.body, true);
  } catch (e) {
    if (e instanceof IdempotencyError) return send(res, errorStatus[e.code] || 400, { error: e.code });
    return send(res, 500, { error: 'storage' });
  }
  // the handler: a new order
  const order = { order_id: nextOrder++, sku: body && body.sku, qty: body && body.qty,
                  total: '19.99', currency: 'EUR' };
  try {
    await idem.onResponse(ireq, { body: order, additional: { status: 201 } });
  } catch (e) {
    return send(res, 500, { error: 'storage' });
  }
  send(res, 201, order, false);
}

const server = http.createServer({ keepAliveTimeout: 60000 }, (req, res) => {
  if (req.method === 'GET' && req.url === '/healthz') return send(res, 200, { status: 'ok' });
  if (req.method !== 'POST' || req.url !== '/orders') return send(res, 404, { error: 'not found' });
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => { createOrder(req, res, Buffer.concat(chunks).toString()); });
});
server.headersTimeout = 30000;
server.requestTimeout = 30000;

storage.connect().then(() => {
  server.listen(port, '127.0.0.1', () => console.error(`peer listening on 127.0.0.1:${port}`));
}, (e) => { console.error('peer: redis:', e.message); process.exit(1); });
process.on('SIGTERM', () => { server.close(); storage.disconnect().finally(() => process.exit(0)); });
