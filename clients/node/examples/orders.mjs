// POST /users/:user/orders made idempotent by caller key with the
// middleware (Express, or Node's own http as here), on the quick start's
// order.create, which guards the counter orders:{subject}. Run with
// IDEMD_URL and IDEMD_API_KEY set.
import { createServer } from 'node:http';
import { randomUUID } from 'node:crypto';
import { Client } from 'idemd';
import { createIdempotent } from 'idemd/express';

const client = new Client({ baseUrl: process.env.IDEMD_URL, apiKey: process.env.IDEMD_API_KEY });

// Without a subject, a guarded operation is refused at start.
try {
  await createIdempotent(client, { operation: 'order.create' });
} catch (e) {
  console.log(e.message.split(',')[0]);
}

// The subject is the user of the path (in Express: (req) => req.params.user,
// or the user your authentication put on req).
const idempotent = await createIdempotent(client, {
  operation: 'order.create',
  subject: (req) => req.url.split('/')[2],
});

let placed = 0;
const server = createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  req.body = JSON.parse(Buffer.concat(chunks).toString() || 'null');   // what express.json() does
  await idempotent(req, res, () => {
    placed += 1;
    res.writeHead(201, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ order: placed, amount: req.body.amount }));
  });
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));

const key = `cart-${randomUUID()}`;
async function submit(path, body, headers = {}) {
  const r = await fetch(`http://127.0.0.1:${server.address().port}${path}`, {
    method: 'POST', body, headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
  });
  const answer = await r.json();
  console.log(r.status, r.headers.get('idempotent-replayed'), answer.code ?? `order ${answer.order}`);
}

await submit('/users/user-42/orders', '{"amount":4200}');             // runs
await submit('/users/user-42/orders', '{ "amount": 4200 }');          // same JSON meaning: replayed
await submit('/users/user-42/orders?coupon=X', '{"amount":4200}');    // another query: 422
await submit('/users/user-42/orders', '{"amount":4200}', { authorization: 'Bearer other' });   // another caller
console.log('orders placed:', placed);
server.close();
