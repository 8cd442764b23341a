package idemd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// MiddlewareOptions configure Client.Middleware.
type MiddlewareOptions struct {
	// Operation is the idemd operation the route's requests are claimed
	// under (required for caller keys; a token names its own).
	Operation string
	// ByToken: the Idempotency-Key header carries an idemd token (issued
	// when the form was rendered) instead of a caller key.
	ByToken bool
	// Key returns the caller key of a request (default: the
	// Idempotency-Key header, bare or as a quoted sf-string). Scope it per
	// user or business object as needed ("order:" + user + ":" + key).
	Key func(r *http.Request) (string, error)
	// Wait lets a duplicate that arrives while the first is in progress
	// wait that long for its outcome (Prefer: wait) instead of getting 409.
	// 0: the incoming request's own Prefer: wait, if any.
	Wait time.Duration
	// MaxBody bounds the request body read to fingerprint it (default 1 MiB;
	// beyond it 413 payload_too_large).
	MaxBody int64
	// Release says which handler statuses give the claim back instead of
	// storing the answer (default: 5xx), so that a retry runs the handler
	// again.
	Release func(status int) bool
	// Subject returns the subject of a request (the principal's user id, a
	// header, a path value): it fills a guarded operation's version_key
	// ("orders:{subject}"). Required for a guarded operation by caller key:
	// NewMiddleware refuses one without it.
	Subject func(r *http.Request) (string, error)
	// ScopeHeaders name the headers whose values, hashed, scope the key per
	// caller (ScopedKey), as the gateway's scope_headers do. nil: the
	// default, Authorization and Cookie; an empty non-nil slice keeps the
	// key as sent.
	ScopeHeaders []string
}

// DefaultScopeHeaders tell callers apart unless MiddlewareOptions say otherwise.
var DefaultScopeHeaders = []string{"authorization", "cookie"}

// CallerScope is 32 hex digits naming the caller: SHA-256 over
// "name\nvalue\n" for each of names (lower-case, in order; an absent
// header has an empty value, repeated ones are joined with ", ").
func CallerScope(h http.Header, names []string) string {
	sum := sha256.New()
	for _, n := range names {
		n = strings.ToLower(n)
		sum.Write([]byte(n + "\n" + strings.Join(h.Values(n), ", ") + "\n"))
	}
	return hex.EncodeToString(sum.Sum(nil))[:32]
}

// ScopedKey is key within the caller's scope, "<CallerScope>:<key>", so
// that the same key from two callers is two records (no names: key as it
// is); an invalid key, or one over 255 bytes once scoped, is the 400
// idempotency_key_invalid idemd would answer.
func ScopedKey(key string, h http.Header, names []string) (string, error) {
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if len(names) == 0 {
		return key, nil
	}
	scoped := CallerScope(h, names) + ":" + key
	if len(scoped) > 255 {
		return "", &Error{Status: 400, Code: ErrIdempotencyKeyInvalid,
			Detail: fmt.Sprintf("a key is at most 222 bytes when scoped per caller (got %d)", len(key))}
	}
	return scoped, nil
}

// NewMiddleware is Middleware after a check of the operation's policy: for
// an operation guarding a counter by {subject}, by caller key, without
// o.Subject, it returns an error naming the fix, so that a route that
// could never fill the subject stops the server at start. An operation
// that does not exist yet, or an idemd that cannot be reached, is not
// checked.
func (c *Client) NewMiddleware(ctx context.Context, o MiddlewareOptions) (func(http.Handler) http.Handler, error) {
	if !o.ByToken && o.Subject == nil && o.Operation != "" {
		op, err := c.GetOperation(ctx, o.Operation)
		if err == nil && strings.Contains(op.VersionKey, "{subject}") {
			return nil, fmt.Errorf("idemd: operation %s guards the version counter %s, and this "+
				"middleware has no subject: set MiddlewareOptions.Subject (a function of the request "+
				"returning the caller's user id, from the principal, a header or r.PathValue), or use "+
				"ByToken (a token carries its subject)", o.Operation, op.VersionKey)
		}
	}
	return c.Middleware(o), nil
}

type ctxKey struct{}

// ClaimFromContext returns the claim the middleware made for this request
// (its ID to forward downstream, its Attempt, a Checkpoint of an earlier
// attempt).
func ClaimFromContext(ctx context.Context) (*Claimed, bool) {
	c, ok := ctx.Value(ctxKey{}).(*Claimed)
	return c, ok
}

// Headers never stored with an answer (idemd refuses them too).
var unstored = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
	"Set-Cookie": true, "Date": true,
}

// HeaderKey reads an Idempotency-Key value: bare, or a quoted sf-string.
func HeaderKey(v string) string {
	v = strings.TrimSpace(v)
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		v = strings.ReplaceAll(strings.ReplaceAll(v[1:len(v)-1], `\"`, `"`), `\\`, `\`)
	}
	return v
}

func writeProblem(w http.ResponseWriter, status int, code Code, detail string, extra http.Header) {
	for _, h := range []string{"Retry-After", "ETag"} {
		if v := extra.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "https://idemd.dev/problems/" + string(code), "title": ProblemTitle(status),
		"status": status, "detail": detail, "code": string(code)})
}

// writeError answers idemd's refusal with idemd's own problem, unchanged.
func writeError(w http.ResponseWriter, err error) {
	if e := AsError(err); e != nil && e.Code != "" {
		if e.Problem == nil {
			writeProblem(w, e.Status, e.Code, e.Detail, e.Header)
			return
		}
		for _, h := range []string{"Retry-After", "ETag"} {
			if v := e.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(e.Status)
		_ = json.NewEncoder(w).Encode(e.Problem)
		return
	}
	h := http.Header{}
	h.Set("Retry-After", "1")
	writeProblem(w, http.StatusServiceUnavailable, ErrUnavailable, "idemd is unreachable: try again", h)
}

type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

// Middleware makes a handler idempotent: each request is claimed in idemd
// by its caller key (or token, with ByToken) and a fingerprint of its
// method, path, query and body. A new request runs the handler; its answer
// is stored (a 5xx releases the claim instead, see Release) and sent with
// Idempotent-Replayed: false. A duplicate gets the stored answer with
// Idempotent-Replayed: true and the handler does not run. idemd's
// refusals reach the client as they are (409 request_in_progress with
// Retry-After, 422 fingerprint_mismatch, 410, 412, ...); a request without
// a key is 400 idempotency_key_missing. The handler's answer is buffered.
func (c *Client) Middleware(o MiddlewareOptions) func(http.Handler) http.Handler {
	if o.MaxBody <= 0 {
		o.MaxBody = 1 << 20
	}
	if o.Release == nil {
		o.Release = func(s int) bool { return s >= 500 }
	}
	if o.Key == nil {
		o.Key = func(r *http.Request) (string, error) { return HeaderKey(r.Header.Get("Idempotency-Key")), nil }
	}
	if o.ScopeHeaders == nil {
		o.ScopeHeaders = DefaultScopeHeaders
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var key string
			var err error
			if o.ByToken {
				key = HeaderKey(r.Header.Get("Idempotency-Key"))
			} else if key, err = o.Key(r); err != nil {
				writeProblem(w, 400, ErrIdempotencyKeyMissing, err.Error(), nil)
				return
			}
			if key == "" {
				writeProblem(w, 400, ErrIdempotencyKeyMissing, "this route needs an Idempotency-Key header", nil)
				return
			}
			if !o.ByToken {
				if key, err = ScopedKey(key, r.Header, o.ScopeHeaders); err != nil {
					writeError(w, err)
					return
				}
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, o.MaxBody+1))
			if err != nil {
				writeProblem(w, 400, ErrInvalidRequest, "cannot read the request body", nil)
				return
			}
			if int64(len(body)) > o.MaxBody {
				writeProblem(w, 413, ErrPayloadTooLarge, "the request body is over "+strconv.FormatInt(o.MaxBody, 10)+" bytes", nil)
				return
			}
			opts := &ClaimOptions{Request: RequestIdentity(r.Method, r.URL.Path, r.URL.RawQuery, body), Wait: o.Wait}
			if o.Subject != nil && !o.ByToken {
				if opts.Subject, err = o.Subject(r); err != nil {
					writeProblem(w, 400, ErrInvalidRequest, err.Error(), nil)
					return
				}
			}
			if im := r.Header.Get("If-Match"); im != "" {
				opts.IfMatch = im
			}
			if opts.Wait == 0 {
				if p := r.Header.Get("Prefer"); strings.HasPrefix(strings.TrimSpace(p), "wait=") {
					if n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(p), "wait="))); err == nil && n > 0 {
						opts.Wait = time.Duration(n) * time.Second
					}
				}
			}
			ctx := r.Context()
			var claim *Claimed
			if o.ByToken {
				claim, err = c.ClaimToken(ctx, key, opts)
			} else {
				claim, err = c.ClaimKey(ctx, o.Operation, key, opts)
			}
			if err != nil {
				writeError(w, err)
				return
			}
			if claim.Replayed {
				writeStored(w, claim.Response, true)
				return
			}
			bg := context.WithoutCancel(ctx)
			release := func() {
				if o.ByToken {
					_, _ = c.ReleaseToken(bg, key, claim.Attempt)
				} else {
					_, _ = c.ReleaseKey(bg, o.Operation, key, claim.Attempt)
				}
			}
			rec := &recorder{header: http.Header{}}
			r2 := r.WithContext(context.WithValue(ctx, ctxKey{}, claim))
			r2.Body = io.NopCloser(bytes.NewReader(body))
			finished := false
			defer func() {
				if !finished {
					release() // the handler panicked: the work was interrupted, not refused
				}
			}()
			next.ServeHTTP(rec, r2)
			finished = true
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			if o.Release(rec.status) {
				release()
			} else {
				out := Outcome{Status: rec.status, Headers: map[string]string{}, Content: rec.body.Bytes()}
				if out.Content == nil {
					out.Content = []byte{}
				}
				for k, v := range rec.header {
					if len(v) > 0 && !unstored[k] && !strings.HasPrefix(k, "Access-Control-") {
						out.Headers[k] = v[0]
					}
				}
				var done *Result
				if o.ByToken {
					done, err = c.CompleteToken(bg, key, claim.Attempt, out)
				} else {
					done, err = c.CompleteKey(bg, o.Operation, key, claim.Attempt, out)
				}
				if err == nil && done.Response != nil {
					// answer exactly what duplicates will get
					writeStored(w, done.Response, false)
					return
				}
			}
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.Header().Set("Idempotent-Replayed", "false")
			w.WriteHeader(rec.status)
			_, _ = w.Write(rec.body.Bytes())
		})
	}
}

// RequestIdentity is what the middleware sends as a request's "request"
// (idemd fingerprints its canonical JSON): method, path, query and the
// body, parsed when it is JSON, so that the same JSON meaning (key order,
// whitespace) is the same request, as everywhere else in idemd; any other
// body counts byte for byte (as text, or its SHA-256 when not UTF-8).
func RequestIdentity(method, path, query string, body []byte) map[string]any {
	id := map[string]any{"method": method, "path": path, "query": query}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	switch {
	case len(body) == 0:
		id["body"] = nil
	case json.Valid(body) && dec.Decode(&doc) == nil:
		id["json"] = doc
	case utf8.Valid(body):
		id["body"] = string(body)
	default:
		sum := sha256.Sum256(body)
		id["body_sha256"] = hex.EncodeToString(sum[:])
	}
	return id
}

func writeStored(w http.ResponseWriter, resp *StoredResponse, replayed bool) {
	if resp == nil {
		resp = &StoredResponse{Status: 200}
	}
	for k, v := range resp.Headers {
		w.Header().Set(k, v)
	}
	w.Header().Set("Idempotent-Replayed", strconv.FormatBool(replayed))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Bytes())
}
