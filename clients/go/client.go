// Package idemd is a client for idemd, the idempotency service: the whole
// HTTP API with typed problems, retries that honour Retry-After, a claim
// helper (RunOnce), a queue-consumer helper (Consume) and net/http
// middleware that makes a handler idempotent by caller key or by token.
//
// Standard library only.
package idemd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const userAgent = "idemd-go/0.1.0"

// Retry says how failed calls are retried. A call is tried again when idemd
// answers 429, 503, or 409 request_in_progress, or when the connection was
// refused (nothing was sent), at most Attempts tries in all (1: never
// retry). The wait before try n+1 is the answer's Retry-After plus a random
// jitter in [0, min(MaxDelay, BaseDelay*2^(n-1))]. No other answer is ever
// retried.
type Retry struct {
	Attempts  int
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// DefaultRetry is the retry of a Client made by New.
var DefaultRetry = Retry{Attempts: 4, BaseDelay: 200 * time.Millisecond, MaxDelay: 5 * time.Second}

// NoRetry tries each call once.
var NoRetry = Retry{Attempts: 1}

// Retryable reports whether err is worth another try of the same call.
func Retryable(err error) bool {
	var te *TransportError
	if errors.As(err, &te) {
		return !te.Sent
	}
	e := AsError(err)
	if e == nil || e.Header == nil { // client-side refusals are final
		return false
	}
	return e.Status == 429 || e.Status == 503 || (e.Status == 409 && e.Code == ErrRequestInProgress)
}

func (r Retry) delay(tries int, err error) time.Duration {
	window := r.BaseDelay << uint(tries-1)
	if window > r.MaxDelay || window <= 0 {
		window = r.MaxDelay
	}
	var d time.Duration
	if e := AsError(err); e != nil && e.HasRetryAfter {
		d = e.RetryAfter
	}
	if window > 0 {
		d += time.Duration(rand.Int63n(int64(window) + 1))
	}
	return d
}

// Client talks to one idemd endpoint with one tenant's API key. It is safe
// for concurrent use.
type Client struct {
	baseURL string
	apiKey  string
	http    *http.Client
	retry   Retry
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the *http.Client (default: one with a 10 s timeout).
func WithHTTPClient(h *http.Client) Option { return func(c *Client) { c.http = h } }

// WithTimeout sets the timeout of each try.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.http = &http.Client{Timeout: d} }
}

// WithRetry sets the retry policy (default DefaultRetry).
func WithRetry(r Retry) Option {
	return func(c *Client) {
		if r.Attempts < 1 {
			r.Attempts = 1
		}
		c.retry = r
	}
}

// New makes a client for baseURL (http://host:port, optionally with a path
// prefix) and an API key ("" sends none).
func New(baseURL, apiKey string, opts ...Option) *Client {
	c := &Client{baseURL: strings.TrimRight(baseURL, "/"), apiKey: apiKey,
		http: &http.Client{Timeout: 10 * time.Second}, retry: DefaultRetry}
	for _, o := range opts {
		o(c)
	}
	return c
}

// seg percent-encodes one path segment: every byte outside A-Z a-z 0-9 - . _ ~.
func seg(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if ch >= 'A' && ch <= 'Z' || ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' ||
			ch == '-' || ch == '.' || ch == '_' || ch == '~' {
			b.WriteByte(ch)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[ch>>4])
			b.WriteByte(hex[ch&15])
		}
	}
	return b.String()
}

func nonEmpty(what, s string) error {
	if s == "" {
		return fmt.Errorf("idemd: %s must not be empty", what)
	}
	return nil
}

type call struct {
	method  string
	path    string
	body    any // nil: no body
	header  map[string]string
	ok      []int
	noAuth  bool
	noRetry bool
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (c *Client) exchange(ctx context.Context, cl *call, payload []byte) (*answer, error) {
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, c.baseURL+cl.path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "application/json")
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if !cl.noAuth && c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	for k, v := range cl.header {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &TransportError{Method: cl.method, Path: cl.path,
			Sent: !errors.Is(err, syscall.ECONNREFUSED), Err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, &TransportError{Method: cl.method, Path: cl.path, Sent: true, Err: err}
	}
	return &answer{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

func (c *Client) do(ctx context.Context, cl *call) (*answer, error) {
	var payload []byte
	if cl.body != nil {
		var err error
		if payload, err = json.Marshal(cl.body); err != nil {
			return nil, fmt.Errorf("idemd: encoding the request: %w", err)
		}
	}
	ok := cl.ok
	if ok == nil {
		ok = []int{200}
	}
	attempts := c.retry.Attempts
	if cl.noRetry || attempts < 1 {
		attempts = 1
	}
	for tries := 1; ; tries++ {
		a, err := c.exchange(ctx, cl, payload)
		if err == nil {
			good := false
			for _, s := range ok {
				good = good || a.status == s
			}
			if good {
				return a, nil
			}
			err = errorFor(a.status, a.header, a.body)
		}
		if tries >= attempts || !Retryable(err) {
			return nil, err
		}
		t := time.NewTimer(c.retry.delay(tries, err))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

func (c *Client) into(ctx context.Context, cl *call, v any) (*answer, error) {
	a, err := c.do(ctx, cl)
	if err != nil {
		return nil, err
	}
	if v != nil && len(a.body) > 0 {
		if err := json.Unmarshal(a.body, v); err != nil {
			return nil, &TransportError{Method: cl.method, Path: cl.path, Sent: true,
				Err: fmt.Errorf("malformed answer: %w", err)}
		}
	}
	return a, nil
}

// ---------------------------------------------------------------- tokens

// IssueOptions are the optional fields of Issue and IssueMany.
type IssueOptions struct {
	TTLSeconds int // 0: the operation's token_ttl_seconds
}

func issueBody(operation, subject string, count int, o *IssueOptions) map[string]any {
	b := map[string]any{"operation": operation, "subject": subject}
	if o != nil && o.TTLSeconds != 0 {
		b["ttl_seconds"] = o.TTLSeconds
	}
	if count != 0 {
		b["count"] = count
	}
	return b
}

// Issue issues one token for operation and subject (POST /v1/tokens).
func (c *Client) Issue(ctx context.Context, operation, subject string, o *IssueOptions) (*IssuedToken, error) {
	var t IssuedToken
	a, err := c.into(ctx, &call{method: "POST", path: "/v1/tokens", ok: []int{201},
		body: issueBody(operation, subject, 0, o)}, &t)
	if err != nil {
		return nil, err
	}
	t.Raw = a.body
	return &t, nil
}

// IssueMany issues count (1..100) distinct tokens in one call.
func (c *Client) IssueMany(ctx context.Context, operation, subject string, count int, o *IssueOptions) ([]IssuedToken, error) {
	var r struct {
		Tokens []json.RawMessage `json:"tokens"`
	}
	if _, err := c.into(ctx, &call{method: "POST", path: "/v1/tokens", ok: []int{201},
		body: issueBody(operation, subject, count, o)}, &r); err != nil {
		return nil, err
	}
	out := make([]IssuedToken, len(r.Tokens))
	for i, raw := range r.Tokens {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, err
		}
		out[i].Raw = raw
	}
	return out, nil
}

func (c *Client) record(ctx context.Context, path string) (*Record, error) {
	var r Record
	a, err := c.into(ctx, &call{method: "GET", path: path}, &r)
	if err != nil {
		return nil, err
	}
	r.Raw = a.body
	return &r, nil
}

// Introspect reads a token's state (GET /v1/tokens/{token}).
func (c *Client) Introspect(ctx context.Context, token string) (*Record, error) {
	if err := nonEmpty("token", token); err != nil {
		return nil, err
	}
	return c.record(ctx, "/v1/tokens/"+seg(token))
}

// Revoke revokes an unused token; one in use is 409 token_in_use.
func (c *Client) Revoke(ctx context.Context, token string) error {
	if err := nonEmpty("token", token); err != nil {
		return err
	}
	_, err := c.do(ctx, &call{method: "DELETE", path: "/v1/tokens/" + seg(token), ok: []int{204}})
	return err
}

// ClaimOptions are the optional parts of a claim.
type ClaimOptions struct {
	Request     any    // any JSON value; its canonical form is the fingerprint (nil: not sent)
	Fingerprint string // an explicit fingerprint instead of Request
	Subject     string // caller keys only: fills the operation's version_key
	IfMatch     string // If-Match, e.g. ETag(7); "" not sent
	// Wait sends Prefer: wait=N (whole seconds, at most 60): a duplicate of
	// a claim in progress waits for its outcome instead of getting 409.
	Wait time.Duration
}

func claimCall(path string, o *ClaimOptions, withSubject bool) *call {
	body := map[string]any{}
	h := map[string]string{}
	if o != nil {
		if o.Request != nil {
			body["request"] = o.Request
		}
		if o.Fingerprint != "" {
			body["fingerprint"] = o.Fingerprint
		}
		if withSubject && o.Subject != "" {
			body["subject"] = o.Subject
		}
		if o.IfMatch != "" {
			h["If-Match"] = o.IfMatch
		}
		if o.Wait > 0 {
			secs := int((o.Wait + time.Second - 1) / time.Second)
			h["Prefer"] = "wait=" + strconv.Itoa(secs)
		}
	}
	return &call{method: "POST", path: path, body: body, header: h, ok: []int{200, 201}}
}

func (c *Client) claim(ctx context.Context, cl *call) (*Claimed, error) {
	var r Claimed
	a, err := c.into(ctx, cl, &r)
	if err != nil {
		return nil, err
	}
	r.Raw = a.body
	r.Replayed = a.status == 200 && (strings.EqualFold(a.header.Get("Idempotent-Replayed"), "true") || r.State == "completed")
	return &r, nil
}

// ClaimToken claims a token: a new attempt (Replayed false) to complete or
// release, or the stored response of a completed duplicate (Replayed true).
func (c *Client) ClaimToken(ctx context.Context, token string, o *ClaimOptions) (*Claimed, error) {
	if err := nonEmpty("token", token); err != nil {
		return nil, err
	}
	return c.claim(ctx, claimCall("/v1/tokens/"+seg(token)+"/claim", o, false))
}

func (c *Client) result(ctx context.Context, path string, body map[string]any) (*Result, error) {
	var r Result
	a, err := c.into(ctx, &call{method: "POST", path: path, body: body}, &r)
	if err != nil {
		return nil, err
	}
	r.Raw = a.body
	return &r, nil
}

func completeBody(attempt int, out Outcome) (map[string]any, error) {
	if err := checkAttempt(attempt); err != nil {
		return nil, err
	}
	b := map[string]any{"attempt": attempt}
	out.fields(b)
	return b, nil
}

func attemptBody(attempt int) (map[string]any, error) {
	if err := checkAttempt(attempt); err != nil {
		return nil, err
	}
	return map[string]any{"attempt": attempt}, nil
}

func extendBody(attempt, leaseSeconds int) (map[string]any, error) {
	b, err := attemptBody(attempt)
	if err == nil && leaseSeconds > 0 {
		b["lease_seconds"] = leaseSeconds
	}
	return b, err
}

func checkpointBody(attempt int, phase string, data any) (map[string]any, error) {
	b, err := attemptBody(attempt)
	if err == nil {
		b["phase"] = phase
		if data != nil {
			b["data"] = data
		}
	}
	return b, err
}

func (c *Client) tokenOp(ctx context.Context, token, what string, body map[string]any, err error) (*Result, error) {
	if err != nil {
		return nil, err
	}
	if err := nonEmpty("token", token); err != nil {
		return nil, err
	}
	return c.result(ctx, "/v1/tokens/"+seg(token)+"/"+what, body)
}

// CompleteToken stores the outcome of attempt.
func (c *Client) CompleteToken(ctx context.Context, token string, attempt int, out Outcome) (*Result, error) {
	b, err := completeBody(attempt, out)
	return c.tokenOp(ctx, token, "complete", b, err)
}

// ReleaseToken gives the claim back after a retryable failure.
func (c *Client) ReleaseToken(ctx context.Context, token string, attempt int) (*Result, error) {
	b, err := attemptBody(attempt)
	return c.tokenOp(ctx, token, "release", b, err)
}

// ExtendToken renews the lease of attempt (leaseSeconds 0: the operation's).
func (c *Client) ExtendToken(ctx context.Context, token string, attempt, leaseSeconds int) (*Result, error) {
	b, err := extendBody(attempt, leaseSeconds)
	return c.tokenOp(ctx, token, "extend", b, err)
}

// CheckpointToken leaves a recovery point (phase [a-z0-9._-]{1,64}, data
// any JSON up to 64 KiB, nil: none) that the next attempt gets in its claim.
func (c *Client) CheckpointToken(ctx context.Context, token string, attempt int, phase string, data any) (*Result, error) {
	b, err := checkpointBody(attempt, phase, data)
	return c.tokenOp(ctx, token, "checkpoint", b, err)
}

// ---------------------------------------------------------------- caller keys

func keyPath(operation, key string) (string, error) {
	if err := nonEmpty("operation", operation); err != nil {
		return "", err
	}
	if err := CheckKey(key); err != nil {
		return "", err
	}
	return "/v1/operations/" + seg(operation) + "/keys/" + seg(key), nil
}

// ClaimKey claims a caller key under operation. An invalid key is refused
// before sending with 400 idempotency_key_invalid.
func (c *Client) ClaimKey(ctx context.Context, operation, key string, o *ClaimOptions) (*Claimed, error) {
	p, err := keyPath(operation, key)
	if err != nil {
		return nil, err
	}
	return c.claim(ctx, claimCall(p+"/claim", o, true))
}

func (c *Client) keyOp(ctx context.Context, operation, key, what string, body map[string]any, err error) (*Result, error) {
	p, kerr := keyPath(operation, key)
	if kerr != nil {
		return nil, kerr
	}
	if err != nil {
		return nil, err
	}
	return c.result(ctx, p+"/"+what, body)
}

// CompleteKey stores the outcome of attempt for a caller key.
func (c *Client) CompleteKey(ctx context.Context, operation, key string, attempt int, out Outcome) (*Result, error) {
	b, err := completeBody(attempt, out)
	return c.keyOp(ctx, operation, key, "complete", b, err)
}

// ReleaseKey gives a caller key's claim back after a retryable failure.
func (c *Client) ReleaseKey(ctx context.Context, operation, key string, attempt int) (*Result, error) {
	b, err := attemptBody(attempt)
	return c.keyOp(ctx, operation, key, "release", b, err)
}

// ExtendKey renews the lease of attempt (leaseSeconds 0: the operation's).
func (c *Client) ExtendKey(ctx context.Context, operation, key string, attempt, leaseSeconds int) (*Result, error) {
	b, err := extendBody(attempt, leaseSeconds)
	return c.keyOp(ctx, operation, key, "extend", b, err)
}

// CheckpointKey leaves a recovery point for a caller key's next attempt.
func (c *Client) CheckpointKey(ctx context.Context, operation, key string, attempt int, phase string, data any) (*Result, error) {
	b, err := checkpointBody(attempt, phase, data)
	return c.keyOp(ctx, operation, key, "checkpoint", b, err)
}

// GetKey introspects a caller key; never claimed → 404 record_not_found.
func (c *Client) GetKey(ctx context.Context, operation, key string) (*Record, error) {
	p, err := keyPath(operation, key)
	if err != nil {
		return nil, err
	}
	return c.record(ctx, p)
}

// ClaimBatch claims 1..500 distinct keys in one call. Each result is what a
// single claim of that key would have answered; an invalid key is that
// item's 400 (decided by idemd), the others go on.
func (c *Client) ClaimBatch(ctx context.Context, operation string, items []BatchClaimItem) ([]BatchClaimResult, error) {
	if err := nonEmpty("operation", operation); err != nil {
		return nil, err
	}
	var r struct {
		Items []json.RawMessage `json:"items"`
	}
	if _, err := c.into(ctx, &call{method: "POST", path: "/v1/operations/" + seg(operation) + "/claims",
		body: map[string]any{"items": items}}, &r); err != nil {
		return nil, err
	}
	out := make([]BatchClaimResult, len(r.Items))
	for i, raw := range r.Items {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, err
		}
		out[i].Raw = raw
	}
	return out, nil
}

// CompleteBatch completes 1..500 claimed keys in one call.
func (c *Client) CompleteBatch(ctx context.Context, operation string, items []BatchCompleteItem) ([]BatchCompleteResult, error) {
	if err := nonEmpty("operation", operation); err != nil {
		return nil, err
	}
	body := make([]map[string]any, len(items))
	for i, it := range items {
		b, err := completeBody(it.Attempt, it.Outcome)
		if err != nil {
			return nil, err
		}
		b["key"] = it.Key
		body[i] = b
	}
	var r struct {
		Items []json.RawMessage `json:"items"`
	}
	if _, err := c.into(ctx, &call{method: "POST", path: "/v1/operations/" + seg(operation) + "/completions",
		body: map[string]any{"items": body}}, &r); err != nil {
		return nil, err
	}
	out := make([]BatchCompleteResult, len(r.Items))
	for i, raw := range r.Items {
		if err := json.Unmarshal(raw, &out[i]); err != nil {
			return nil, err
		}
		out[i].Raw = raw
	}
	return out, nil
}

// ---------------------------------------------------------------- records

// GetRecord reads a record by its 32-hex id (a claim's ID, a token's ID, the
// Idempotency-Key a gateway forwarded); unknown → 404 record_not_found.
func (c *Client) GetRecord(ctx context.Context, id string) (*Record, error) {
	if err := nonEmpty("id", id); err != nil {
		return nil, err
	}
	return c.record(ctx, "/v1/records/"+seg(id))
}

// RecordEvents is the record's audit trail, oldest first.
func (c *Client) RecordEvents(ctx context.Context, id string) ([]RecordEvent, error) {
	if err := nonEmpty("id", id); err != nil {
		return nil, err
	}
	var r struct {
		Events []RecordEvent `json:"events"`
	}
	if _, err := c.into(ctx, &call{method: "GET", path: "/v1/records/" + seg(id) + "/events"}, &r); err != nil {
		return nil, err
	}
	return r.Events, nil
}

// ListRecords reads one page of records, newest claim first; pass the
// page's NextCursor as Cursor for the next ("" on the last page).
func (c *Client) ListRecords(ctx context.Context, f RecordFilter) (*RecordPage, error) {
	q := url.Values{}
	add := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	add("operation", f.Operation)
	add("state", f.State)
	add("subject", f.Subject)
	if f.OlderThan > 0 {
		add("older_than", strconv.Itoa(f.OlderThan))
	}
	if f.Limit > 0 {
		add("limit", strconv.Itoa(f.Limit))
	}
	add("cursor", f.Cursor)
	path := "/v1/records"
	if len(q) > 0 {
		path += "?" + strings.ReplaceAll(q.Encode(), "+", "%20")
	}
	var r struct {
		Records    []Record `json:"records"`
		NextCursor *string  `json:"next_cursor"`
	}
	a, err := c.into(ctx, &call{method: "GET", path: path}, &r)
	if err != nil {
		return nil, err
	}
	p := &RecordPage{Records: r.Records, Raw: a.body}
	if r.NextCursor != nil {
		p.NextCursor = *r.NextCursor
	}
	return p, nil
}

// ---------------------------------------------------------------- versions, operations, health

// GetVersion reads a version counter (an unknown key is version 0).
func (c *Client) GetVersion(ctx context.Context, key string) (*Version, error) {
	if err := nonEmpty("key", key); err != nil {
		return nil, err
	}
	var v Version
	a, err := c.into(ctx, &call{method: "GET", path: "/v1/versions/" + seg(key)}, &v)
	if err != nil {
		return nil, err
	}
	v.Raw = a.body
	return &v, nil
}

// BumpVersion bumps the counter from ifMatch (e.g. ETag(7)) to N+1 and
// returns N+1; stale → 412 version_mismatch (see Error.CurrentVersion).
func (c *Client) BumpVersion(ctx context.Context, key, ifMatch string) (int64, error) {
	if err := nonEmpty("key", key); err != nil {
		return 0, err
	}
	h := map[string]string{}
	if ifMatch != "" {
		h["If-Match"] = ifMatch
	}
	var v struct {
		Version int64 `json:"version"`
	}
	if _, err := c.into(ctx, &call{method: "POST", path: "/v1/versions/" + seg(key), header: h}, &v); err != nil {
		return 0, err
	}
	return v.Version, nil
}

func decodeOperation(raw []byte) (*Operation, error) {
	var op Operation
	if err := json.Unmarshal(raw, &op); err != nil {
		return nil, err
	}
	op.Raw = raw
	return &op, nil
}

// PutOperation creates or replaces the policy of operation name.
func (c *Client) PutOperation(ctx context.Context, name string, p Operation) (*Operation, error) {
	if err := nonEmpty("operation", name); err != nil {
		return nil, err
	}
	p.Name = ""
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	body := map[string]any{}
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, err
	}
	for k, v := range p.Extra {
		body[k] = v
	}
	a, err := c.do(ctx, &call{method: "PUT", path: "/v1/operations/" + seg(name), body: body, ok: []int{200, 201}})
	if err != nil {
		return nil, err
	}
	return decodeOperation(a.body)
}

// GetOperation reads an operation's policy.
func (c *Client) GetOperation(ctx context.Context, name string) (*Operation, error) {
	if err := nonEmpty("operation", name); err != nil {
		return nil, err
	}
	a, err := c.do(ctx, &call{method: "GET", path: "/v1/operations/" + seg(name)})
	if err != nil {
		return nil, err
	}
	return decodeOperation(a.body)
}

// ListOperations reads every operation of the tenant.
func (c *Client) ListOperations(ctx context.Context) ([]Operation, error) {
	var r struct {
		Operations []json.RawMessage `json:"operations"`
	}
	if _, err := c.into(ctx, &call{method: "GET", path: "/v1/operations"}, &r); err != nil {
		return nil, err
	}
	out := make([]Operation, 0, len(r.Operations))
	for _, raw := range r.Operations {
		op, err := decodeOperation(raw)
		if err != nil {
			return nil, err
		}
		out = append(out, *op)
	}
	return out, nil
}

// Health is GET /healthz.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	var h Health
	if _, err := c.into(ctx, &call{method: "GET", path: "/healthz", noAuth: true}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Ready is GET /readyz: status "ready", or "not_ready" with a reason (never retried).
func (c *Client) Ready(ctx context.Context) (*Health, error) {
	var h Health
	if _, err := c.into(ctx, &call{method: "GET", path: "/readyz", noAuth: true, noRetry: true, ok: []int{200, 503}}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}
