package idemd

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
)

// Target names what RunOnce claims: a caller key (Operation and Key) or a
// token (Token).
type Target struct {
	Operation string
	Key       string
	Token     string
}

func (t Target) check() error {
	if (t.Token == "") == (t.Operation == "" || t.Key == "") {
		return errors.New("idemd: a Target is an Operation and a Key, or a Token")
	}
	return nil
}

// finalError marks an error as final for the helpers: its failure is stored
// as the outcome instead of releasing the claim.
type finalError struct{ err error }

func (f *finalError) Error() string { return f.err.Error() }
func (f *finalError) Unwrap() error { return f.err }

// Final wraps err so that RunOnce, Consume and the middleware store the
// failure (a 500) as final instead of releasing the claim for a retry.
// errors.Is and errors.As see through it.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return &finalError{err}
}

// IsFinal reports whether err was wrapped by Final.
func IsFinal(err error) bool {
	var f *finalError
	return errors.As(err, &f)
}

// defaultReleaseOn releases on every error except those wrapped by Final.
func defaultReleaseOn(err error) bool { return !IsFinal(err) }

func failureOutcome(err error) Outcome {
	var f *finalError
	if errors.As(err, &f) {
		err = f.err
	}
	name := reflect.TypeOf(err).String()
	return Outcome{Status: 500, Body: map[string]any{"error": name}}
}

// RunOptions are the options of RunOnce: the claim's, and ReleaseOn.
type RunOptions struct {
	ClaimOptions
	// ReleaseOn says whether an error of the function gives the claim back
	// so that a retry runs it again (default: every error not wrapped by
	// Final). Otherwise a 500 {"error": "<type>"} is stored as final.
	ReleaseOn func(error) bool
}

// RunResult is what RunOnce returns: the stored response (the one just
// stored, or the replayed one when Replayed) and the claim.
type RunResult struct {
	Replayed bool
	Response StoredResponse
	Claim    *Claimed
}

// RunOnce runs fn at most once for a caller key or a token and returns the
// stored response. A new claim runs fn and stores its Outcome; a duplicate
// of a completed claim returns the stored response and fn does not run. An
// error of fn releases the claim (when ReleaseOn says so; default: unless
// wrapped by Final) or stores a 500 as final; either way RunOnce returns
// fn's error unchanged. A panic in fn releases the claim and panics on.
func (c *Client) RunOnce(ctx context.Context, t Target, fn func(ctx context.Context, claim *Claimed) (Outcome, error), o *RunOptions) (*RunResult, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	if o == nil {
		o = &RunOptions{}
	}
	releaseOn := o.ReleaseOn
	if releaseOn == nil {
		releaseOn = defaultReleaseOn
	}
	var claim *Claimed
	var err error
	if t.Token != "" {
		claim, err = c.ClaimToken(ctx, t.Token, &o.ClaimOptions)
	} else {
		claim, err = c.ClaimKey(ctx, t.Operation, t.Key, &o.ClaimOptions)
	}
	if err != nil {
		return nil, err
	}
	if claim.Replayed {
		var resp StoredResponse
		if claim.Response != nil {
			resp = *claim.Response
		}
		return &RunResult{Replayed: true, Response: resp, Claim: claim}, nil
	}
	release := func() {
		// The error that matters is the function's; if this fails the lease runs out.
		if t.Token != "" {
			_, _ = c.ReleaseToken(context.WithoutCancel(ctx), t.Token, claim.Attempt)
		} else {
			_, _ = c.ReleaseKey(context.WithoutCancel(ctx), t.Operation, t.Key, claim.Attempt)
		}
	}
	complete := func(out Outcome) (*Result, error) {
		if t.Token != "" {
			return c.CompleteToken(context.WithoutCancel(ctx), t.Token, claim.Attempt, out)
		}
		return c.CompleteKey(context.WithoutCancel(ctx), t.Operation, t.Key, claim.Attempt, out)
	}
	out, ferr := runGuarded(ctx, claim, fn, release)
	if ferr != nil {
		if releaseOn(ferr) {
			release()
		} else {
			_, _ = complete(failureOutcome(ferr))
		}
		return nil, ferr
	}
	done, err := complete(out)
	if err != nil {
		return nil, err
	}
	res := &RunResult{Claim: claim}
	if done.Response != nil {
		res.Response = *done.Response
	}
	return res, nil
}

func runGuarded(ctx context.Context, claim *Claimed, fn func(context.Context, *Claimed) (Outcome, error), release func()) (out Outcome, err error) {
	ok := false
	defer func() {
		if !ok {
			release() // a panic: the work was interrupted, not refused
		}
	}()
	out, err = fn(ctx, claim)
	ok = true
	return out, err
}

// MessageOutcome is what happened to one message of Consume.
//
// Outcome is one of "processed" (new: the handler ran, its Result is
// stored), "replayed" (done before: the handler did not run, Response is
// the stored outcome), "in_progress" (another consumer holds it right now),
// "failed" (the handler returned Err: released when Retry, else the
// failure was stored), "rejected" (idemd refused the claim: Status, Code,
// Err), "lost" (the handler ran but its result was not stored, e.g.
// lease_lost). Retry says whether the message should be delivered again.
type MessageOutcome[M any] struct {
	Message  M
	Key      string
	Outcome  string
	Retry    bool
	Result   *Outcome
	Response *StoredResponse
	Err      error
	Status   int
	Code     string
	Attempt  int
}

// ConsumeOptions configure Consume. Key and Handler are required.
type ConsumeOptions[M any] struct {
	Key         func(M) string
	Handler     func(ctx context.Context, m M, claim BatchClaimResult) (Outcome, error)
	Request     func(M) any    // optional: the claim's request (its fingerprint)
	Fingerprint func(M) string // optional
	Subject     func(M) string // optional
	ReleaseOn   func(error) bool
	Concurrency int // handlers run at once (default 8)
}

// Consume processes a batch of at-least-once messages exactly once each:
// one batch claim of every message's key, the handler only for the new
// ones, one batch completion, a release for each handler error that
// ReleaseOn accepts (default: every error not wrapped by Final). It returns
// one outcome per message, in order; a key repeated within the batch shares
// the first message's outcome. The error is non-nil only when the batch
// claim itself failed.
func Consume[M any](ctx context.Context, c *Client, operation string, messages []M, o ConsumeOptions[M]) ([]MessageOutcome[M], error) {
	if o.Key == nil || o.Handler == nil {
		return nil, errors.New("idemd: Consume needs Key and Handler")
	}
	if len(messages) == 0 {
		return nil, nil
	}
	releaseOn := o.ReleaseOn
	if releaseOn == nil {
		releaseOn = defaultReleaseOn
	}
	keys := make([]string, len(messages))
	first := map[string]int{}
	var items []BatchClaimItem
	for i, m := range messages {
		k := o.Key(m)
		keys[i] = k
		if _, dup := first[k]; dup {
			continue
		}
		first[k] = i
		it := BatchClaimItem{Key: k}
		if o.Request != nil {
			it.Request = o.Request(m)
		}
		if o.Fingerprint != nil {
			it.Fingerprint = o.Fingerprint(m)
		}
		if o.Subject != nil {
			it.Subject = o.Subject(m)
		}
		items = append(items, it)
	}
	claims, err := c.ClaimBatch(ctx, operation, items)
	if err != nil {
		return nil, err
	}
	done := make(map[int]*MessageOutcome[M], len(items))
	var todo []BatchClaimResult
	for _, r := range claims {
		i, ok := first[r.Key]
		if !ok {
			return nil, fmt.Errorf("idemd: the batch answer names key %q that was not sent", r.Key)
		}
		m := messages[i]
		switch {
		case r.Status == 201:
			todo = append(todo, r)
		case r.Status == 200:
			done[i] = &MessageOutcome[M]{Message: m, Key: r.Key, Outcome: "replayed", Response: r.Response, Status: 200}
		case r.Code == string(ErrRequestInProgress):
			done[i] = &MessageOutcome[M]{Message: m, Key: r.Key, Outcome: "in_progress", Retry: true, Status: r.Status, Code: r.Code}
		default:
			e := &Error{Status: r.Status, Code: Code(r.Code), Detail: "batch claim item refused"}
			done[i] = &MessageOutcome[M]{Message: m, Key: r.Key, Outcome: "rejected", Err: e,
				Retry: r.Status == 429 || r.Status == 503, Status: r.Status, Code: r.Code}
		}
	}
	conc := o.Concurrency
	if conc <= 0 {
		conc = 8
	}
	var mu sync.Mutex
	var completions []BatchCompleteItem
	var releases []BatchClaimResult
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for _, r := range todo {
		r := r
		i := first[r.Key]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			m := messages[i]
			out, herr := o.Handler(ctx, m, r)
			mu.Lock()
			defer mu.Unlock()
			mo := &MessageOutcome[M]{Message: m, Key: r.Key, Attempt: r.Attempt, Status: 201}
			done[i] = mo
			if herr != nil {
				mo.Outcome, mo.Err = "failed", herr
				if releaseOn(herr) {
					mo.Retry = true
					releases = append(releases, r)
					return
				}
				out = failureOutcome(herr)
			} else {
				mo.Outcome = "processed"
				res := out
				mo.Result = &res
			}
			completions = append(completions, BatchCompleteItem{Key: r.Key, Attempt: r.Attempt, Outcome: out})
		}()
	}
	wg.Wait()
	bg := context.WithoutCancel(ctx)
	for _, r := range releases {
		_, _ = c.ReleaseKey(bg, operation, r.Key, r.Attempt) // on failure the lease runs out
	}
	if len(completions) > 0 {
		sort.Slice(completions, func(a, b int) bool { return first[completions[a].Key] < first[completions[b].Key] })
		results, err := c.CompleteBatch(bg, operation, completions)
		if err != nil {
			for _, it := range completions {
				mo := done[first[it.Key]]
				mo.Outcome, mo.Err, mo.Retry = "lost", err, Retryable(err)
			}
		}
		for _, r := range results {
			if !r.OK() {
				mo := done[first[r.Key]]
				mo.Outcome, mo.Status, mo.Code, mo.Retry = "lost", r.Status, r.Code, false
			}
		}
	}
	out := make([]MessageOutcome[M], len(messages))
	for i, m := range messages {
		o := *done[first[keys[i]]]
		o.Message = m
		out[i] = o
	}
	return out, nil
}
