package idemd_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"idemd.dev/go/idemd"
)

func uniq(p string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return p + "." + hex.EncodeToString(b)
}

func liveClient(t *testing.T) *idemd.Client {
	t.Helper()
	if os.Getenv("IDEMD_URL") == "" || os.Getenv("IDEMD_API_KEY") == "" {
		t.Skip("IDEMD_URL and IDEMD_API_KEY are not set (run tests/clients.sh)")
	}
	return idemd.New(os.Getenv("IDEMD_URL"), os.Getenv("IDEMD_API_KEY"),
		idemd.WithRetry(idemd.Retry{Attempts: 3, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond}))
}

func newOp(t *testing.T, c *idemd.Client) string {
	t.Helper()
	name := uniq("op")
	if _, err := c.PutOperation(context.Background(), name, idemd.Operation{TokenTTLSeconds: 3600, RetentionSeconds: 86400, LeaseSeconds: 30}); err != nil {
		t.Fatal(err)
	}
	return name
}

func post(t *testing.T, url, key, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestMiddlewareByCallerKey(t *testing.T) {
	c := liveClient(t)
	op := newOp(t, c)
	var runs atomic.Int32
	h := c.Middleware(idemd.MiddlewareOptions{Operation: op})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		claim, ok := idemd.ClaimFromContext(r.Context())
		if !ok || claim.Attempt < 1 {
			t.Errorf("no claim in the context")
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"order":%d,"echo":%q}`, n, body)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	key := uniq("order:u-1")

	st, hd, body := post(t, srv.URL+"/orders", key, "item=42")
	if st != 201 || hd.Get("Idempotent-Replayed") != "false" || hd.Get("Location") != "/orders/1" {
		t.Fatalf("first: %d %v %s", st, hd, body)
	}
	st2, hd2, body2 := post(t, srv.URL+"/orders", `"`+key+`"`, "item=42") // sf-string form
	if st2 != 201 || hd2.Get("Idempotent-Replayed") != "true" || body2 != body || hd2.Get("Location") != "/orders/1" {
		t.Fatalf("duplicate: %d %v %s (first %s)", st2, hd2, body2, body)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
	st, _, body = post(t, srv.URL+"/orders", key, "item=43")
	if st != 422 || !strings.Contains(body, "fingerprint_mismatch") {
		t.Fatalf("other body: %d %s", st, body)
	}
	st, _, body = post(t, srv.URL+"/orders", "", "item=42")
	if st != 400 || !strings.Contains(body, "idempotency_key_missing") {
		t.Fatalf("no key: %d %s", st, body)
	}
	st, _, body = post(t, srv.URL+"/orders", "has space", "item=42")
	if st != 400 || !strings.Contains(body, "idempotency_key_invalid") {
		t.Fatalf("bad key: %d %s", st, body)
	}
}

func TestMiddlewareReleasesOn5xx(t *testing.T) {
	c := liveClient(t)
	op := newOp(t, c)
	var runs atomic.Int32
	srv := httptest.NewServer(c.Middleware(idemd.MiddlewareOptions{Operation: op})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "payment provider down", 503)
			return
		}
		fmt.Fprint(w, "paid")
	})))
	defer srv.Close()
	key := uniq("pay")
	if st, _, _ := post(t, srv.URL, key, "x"); st != 503 {
		t.Fatalf("first: %d", st)
	}
	if st, hd, b := post(t, srv.URL, key, "x"); st != 200 || b != "paid" || hd.Get("Idempotent-Replayed") != "false" {
		t.Fatalf("retry: %d %s", st, b)
	}
	if st, hd, b := post(t, srv.URL, key, "x"); st != 200 || b != "paid" || hd.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("duplicate: %d %s", st, b)
	}
	scoped, _ := idemd.ScopedKey(key, http.Header{}, idemd.DefaultScopeHeaders)
	rec, err := c.GetKey(context.Background(), op, scoped)
	if err != nil || rec.Attempt != 2 || rec.State != "completed" {
		t.Fatalf("record: %+v %v", rec, err)
	}
}

func TestMiddlewareByTokenAndWait(t *testing.T) {
	c := liveClient(t)
	op := newOp(t, c)
	tok, err := c.Issue(context.Background(), op, "user-7", nil)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	srv := httptest.NewServer(c.Middleware(idemd.MiddlewareOptions{ByToken: true, Wait: 10 * time.Second})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		time.Sleep(300 * time.Millisecond)
		w.WriteHeader(201)
		fmt.Fprint(w, `{"order":"o-7"}`)
	})))
	defer srv.Close()
	var wg sync.WaitGroup
	results := make([]string, 3)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			st, hd, b := post(t, srv.URL+"/checkout", tok.Token, "cart=1")
			results[i] = fmt.Sprintf("%d %s %s", st, hd.Get("Idempotent-Replayed"), b)
		}(i)
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times: %v", runs.Load(), results)
	}
	for _, r := range results {
		if !strings.HasPrefix(r, "201 ") || !strings.HasSuffix(r, `{"order":"o-7"}`) {
			t.Fatalf("answers: %v", results)
		}
	}
	if st, _, b := post(t, srv.URL+"/checkout", "garbage", "cart=1"); st != 400 || !strings.Contains(b, "token_malformed") {
		t.Fatalf("bad token: %d %s", st, b)
	}
}

// The same JSON meaning is the same request (key order, whitespace), and
// idemd's own problem reaches the caller unchanged (its title included).
func TestMiddlewareFingerprintIsJSONMeaningAndProblemUnchanged(t *testing.T) {
	c := liveClient(t)
	op := newOp(t, c)
	var runs atomic.Int32
	h := c.Middleware(idemd.MiddlewareOptions{Operation: op})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		fmt.Fprintf(w, `{"order":%d}`, runs.Add(1))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	key := uniq("k")
	if s, _, b := post(t, srv.URL, key, `{"amount":4200,"cart":"c-1"}`); s != 201 || b != `{"order":1}` {
		t.Fatalf("first: %d %s", s, b)
	}
	s, hdr, b := post(t, srv.URL, key, "{ \"cart\": \"c-1\",\n  \"amount\": 4200 }")
	if s != 201 || b != `{"order":1}` || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("same JSON meaning: %d %s %v", s, b, hdr)
	}
	s, _, b = post(t, srv.URL, key, `{"amount":4201,"cart":"c-1"}`)
	want := `"title":"Unprocessable Content"`
	if s != 422 || !strings.Contains(b, want) || !strings.Contains(b, `"code":"fingerprint_mismatch"`) {
		t.Fatalf("another request: %d %s", s, b)
	}
	if runs.Load() != 1 {
		t.Fatalf("the handler ran %d times", runs.Load())
	}
	if idemd.ProblemTitle(422) != "Unprocessable Content" || idemd.ProblemTitle(413) != "Content Too Large" {
		t.Fatal("ProblemTitle")
	}
}

func TestMiddlewareScopesPerCallerAndFillsTheSubject(t *testing.T) {
	c := liveClient(t)
	ctx := context.Background()
	op := uniq("guarded")
	if _, err := c.PutOperation(ctx, op, idemd.Operation{TokenTTLSeconds: 3600, RetentionSeconds: 86400,
		LeaseSeconds: 30, VersionKey: "orders:{subject}"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.NewMiddleware(ctx, idemd.MiddlewareOptions{Operation: op}); err == nil ||
		!strings.Contains(err.Error(), "MiddlewareOptions.Subject") {
		t.Fatalf("a guarded operation without Subject: %v", err)
	}
	var runs atomic.Int32
	mw, err := c.NewMiddleware(ctx, idemd.MiddlewareOptions{Operation: op,
		Subject: func(r *http.Request) (string, error) { return r.PathValue("user"), nil }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /users/{user}/orders", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		w.WriteHeader(201)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	user := uniq("u")
	url := srv.URL + "/users/" + user + "/orders"
	_, h1, _ := post(t, url, "k-1", "{}", "Authorization", "Bearer alice")
	_, h2, _ := post(t, url, "k-1", "{}", "Authorization", "Bearer alice")
	_, h3, _ := post(t, url, "k-1", "{}", "Authorization", "Bearer bob")
	got := []string{h1.Get("Idempotent-Replayed"), h2.Get("Idempotent-Replayed"), h3.Get("Idempotent-Replayed")}
	if strings.Join(got, ",") != "false,true,false" || runs.Load() != 2 {
		t.Fatalf("replayed %v, runs %d", got, runs.Load())
	}
	v, err := c.GetVersion(ctx, "orders:"+user)
	if err != nil || v.Version != 2 {
		t.Fatalf("the subject fills orders:{subject}: %+v %v", v, err)
	}
	h := http.Header{}
	h.Set("Authorization", "Bearer alice")
	k, _ := idemd.ScopedKey("k-1", h, idemd.DefaultScopeHeaders)
	if rec, err := c.GetKey(ctx, op, k); err != nil || rec.State != "completed" {
		t.Fatalf("alice's record: %+v %v", rec, err)
	}
}
