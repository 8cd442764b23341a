"""Capture a payment at most once per key, and handle a batch of queue
events exactly once each. Run with IDEMD_URL and IDEMD_API_KEY set."""

import os

import idemd

client = idemd.Client(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"])
OPERATION = os.environ.get("EXAMPLE_OPERATION", "payment.capture")
client.put_operation(OPERATION, token_ttl_seconds=3600, retention_seconds=86400,
                     lease_seconds=30)


def capture(payment_id: str, amount: int) -> idemd.RunResult[idemd.Outcome]:
    """Charges once; a retry with the same payment id gets the first answer."""
    def charge(claim: idemd.Claim) -> idemd.Outcome:
        # call the payment provider here (claim.id is the record's id, to pass
        # on as its idempotency key); an exception releases the claim
        return idemd.Outcome(201, {"charge": "ch_" + payment_id, "amount": amount})
    return client.run_once(charge, operation=OPERATION, key="capture:" + payment_id,
                           request={"amount": amount})


first = capture("p-1001", 1250)
again = capture("p-1001", 1250)          # charge does not run again
print(first.response["status"], again.replayed, again.response == first.response)  # 201 True True
try:
    capture("p-1001", 9999)              # same key, another request
except idemd.FingerprintMismatchError as e:
    print(e.status, e.code)              # 422 fingerprint_mismatch

events = [{"id": "evt_1", "to": "a@example.com"}, {"id": "evt_2", "to": "b@example.com"}]
for o in client.consume(OPERATION, events, key=lambda m: "email:" + m["id"],
                        handler=lambda m, claim: {"sent_to": m["to"]}):
    print(o.key, o.outcome, "ack" if not o.retry else "redeliver")
