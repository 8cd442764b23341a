"""Capture a payment at most once per key, and handle a batch of queue
events exactly once each. Run with IDEMD_URL and IDEMD_API_KEY set."""

import os

import idemd

client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"])
OPERATION = os.environ.get("EXAMPLE_OPERATION", "payment.capture")
client.put_operation(OPERATION, token_ttl_seconds=3600, retention_seconds=86400,
                     lease_seconds=30)


def capture(payment_id: str, amount: int) -> idemd.StoredResponse:
    """Charges once; a retry with the same payment id gets the first answer."""
    def charge() -> idemd.Outcome:
        # call the payment provider here; an exception releases the claim
        return idemd.Outcome(201, {"charge": "ch_" + payment_id, "amount": amount})
    return client.run_once(OPERATION, "capture:" + payment_id, charge,
                           request={"amount": amount})


first = capture("p-1001", 1250)
again = capture("p-1001", 1250)          # the handler does not run again
print(first["status"], again == first)   # 201 True
try:
    capture("p-1001", 9999)              # same key, another request
except idemd.FingerprintMismatchError as e:
    print(e.status, e.code)              # 422 fingerprint_mismatch

events = [{"id": "evt_1", "to": "a@example.com"}, {"id": "evt_2", "to": "b@example.com"}]
for o in client.consume(OPERATION, events, key=lambda m: "email:" + m["id"],
                        handler=lambda m: {"sent_to": m["to"]}):
    print(o.key, o.outcome, "ack" if not o.retry else "redeliver")
