package idemd_test

import (
	"context"
	"fmt"

	"idemd.dev/go/idemd"
)

// Email is a message from a queue that delivers at least once.
type Email struct {
	ID string // the event id: the caller key
	To string
}

// sendBatch handles one polled batch: one batch claim, the handler only for
// the messages not done before, one batch completion. It returns the ids to
// acknowledge; the others are redelivered.
func sendBatch(ctx context.Context, client *idemd.Client, operation string, batch []Email) ([]string, error) {
	outcomes, err := idemd.Consume(ctx, client, operation, batch, idemd.ConsumeOptions[Email]{
		Key:     func(m Email) string { return "email:" + m.ID },
		Request: func(m Email) any { return m },
		Handler: func(ctx context.Context, m Email, claim idemd.BatchClaimResult) (idemd.Outcome, error) {
			// send the mail here; an error releases the claim (idemd.Final(err) stores it)
			return idemd.Outcome{Status: 200, Body: map[string]string{"sent_to": m.To}}, nil
		},
	})
	if err != nil {
		return nil, err // the batch claim itself failed: redeliver everything
	}
	var ack []string
	for _, o := range outcomes {
		fmt.Printf("%s: %s\n", o.Message.ID, o.Outcome) // processed, replayed, in_progress, failed, ...
		if !o.Retry {
			ack = append(ack, o.Message.ID)
		}
	}
	return ack, nil
}
