// Capture a payment at most once per key, and handle a batch of queue
// events exactly once each. Run with IDEMD_URL and IDEMD_API_KEY set.
import { Client, Outcome, FingerprintMismatchError } from 'idemd';

const client = new Client({ baseUrl: process.env.IDEMD_URL, apiKey: process.env.IDEMD_API_KEY });
const OPERATION = process.env.EXAMPLE_OPERATION ?? 'payment.capture';
await client.putOperation(OPERATION, { token_ttl_seconds: 3600, retention_seconds: 86400, lease_seconds: 30 });

// Charges once; a retry with the same payment id gets the first answer.
async function capture(paymentId, amount) {
  const r = await client.runOnce({ operation: OPERATION, key: `capture:${paymentId}` },
    // call the payment provider here; a thrown error releases the claim
    async () => new Outcome(201, { charge: `ch_${paymentId}`, amount }),
    { request: { amount } });
  return r.response;
}

const first = await capture('p-1002', 1250);
const again = await capture('p-1002', 1250);   // the function does not run again
console.log(first.status, JSON.stringify(again) === JSON.stringify(first));   // 201 true
try {
  await capture('p-1002', 9999);               // same key, another request
} catch (e) {
  if (e instanceof FingerprintMismatchError) console.log(e.status, e.code);   // 422 fingerprint_mismatch
}

const events = [{ id: 'evt_3', to: 'a@example.com' }, { id: 'evt_4', to: 'b@example.com' }];
const outcomes = await client.consume(OPERATION, events, {
  key: (m) => `email:${m.id}`,
  handler: async (m) => ({ sent_to: m.to }),
});
for (const o of outcomes) console.log(o.key, o.outcome, o.retry ? 'redeliver' : 'ack');
