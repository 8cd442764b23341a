package idemd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"idemd.dev/go/idemd"
)

// placeOrder is the application's own work: it must run once per order.
func placeOrder(w http.ResponseWriter, r *http.Request) {
	claim, _ := idemd.ClaimFromContext(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"order": "o-1", "attempt": claim.Attempt})
}

// checkoutMux makes POST /orders idempotent by caller key: the client sends
// Idempotency-Key; a retry of the same request gets the stored answer with
// Idempotent-Replayed: true, and placeOrder does not run again.
func checkoutMux(client *idemd.Client, operation string) *http.ServeMux {
	mux := http.NewServeMux()
	idempotent := client.Middleware(idemd.MiddlewareOptions{Operation: operation})
	mux.Handle("POST /orders", idempotent(http.HandlerFunc(placeOrder)))
	return mux
}

// capture charges a payment at most once per key with the claim helper: a
// new key runs the function and stores its outcome, a duplicate gets the
// stored outcome back, and an error releases the claim for a retry.
func capture(ctx context.Context, client *idemd.Client, operation, paymentID string) error {
	res, err := client.RunOnce(ctx, idemd.Target{Operation: operation, Key: "capture:" + paymentID},
		func(ctx context.Context, claim *idemd.Claimed) (idemd.Outcome, error) {
			// charge the card here, passing claim.ID as the provider's idempotency key
			return idemd.Outcome{Status: 201, Body: map[string]string{"charge": "ch_" + paymentID}}, nil
		}, &idemd.RunOptions{ClaimOptions: idemd.ClaimOptions{Request: map[string]any{"amount": 1250}}})
	if errors.Is(err, idemd.ErrFingerprintMismatch) {
		return fmt.Errorf("payment %s was captured with another amount: %w", paymentID, err)
	}
	if err != nil {
		return err
	}
	fmt.Printf("replayed=%v status=%d body=%s\n", res.Replayed, res.Response.Status, res.Response.Body)
	return nil
}
