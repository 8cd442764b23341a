package idemd_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"idemd.dev/go/idemd"
)

func TestTypedErrors(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set("ETag", `"9"`)
		w.WriteHeader(412)
		_, _ = w.Write([]byte(`{"type":"x","title":"t","status":412,"detail":"stale","code":"version_mismatch"}`))
	}))
	defer srv.Close()
	c := idemd.New(srv.URL, "k")
	_, err := c.BumpVersion(context.Background(), "orders:u", idemd.ETag(3))
	if !errors.Is(err, idemd.ErrVersionMismatch) || errors.Is(err, idemd.ErrLeaseLost) {
		t.Fatalf("errors.Is: %v", err)
	}
	var e *idemd.Error
	if !errors.As(err, &e) || e.Status != 412 || e.Code != idemd.ErrVersionMismatch || e.Detail != "stale" {
		t.Fatalf("errors.As: %#v", e)
	}
	if v, ok := e.CurrentVersion(); !ok || v != 9 {
		t.Fatalf("current version %d %v", v, ok)
	}
	if calls.Load() != 1 || idemd.Retryable(err) {
		t.Fatalf("a 412 was retried")
	}
	for _, code := range idemd.Codes {
		if idemd.ErrorFor(string(code)) != code {
			t.Fatalf("ErrorFor(%s)", code)
		}
	}
}

func TestClientSideRefusals(t *testing.T) {
	c := idemd.New("http://127.0.0.1:1", "k", idemd.WithRetry(idemd.NoRetry))
	ctx := context.Background()
	for _, k := range []string{"", "a b", "é", string(make([]byte, 256))} {
		if _, err := c.ClaimKey(ctx, "op", k, nil); !errors.Is(err, idemd.ErrIdempotencyKeyInvalid) || idemd.AsError(err).Status != 400 {
			t.Fatalf("key %q: %v", k, err)
		}
	}
	if _, err := c.CompleteKey(ctx, "op", "k", 0, idemd.Outcome{}); !errors.Is(err, idemd.ErrInvalidRequest) {
		t.Fatalf("attempt 0: %v", err)
	}
	if _, err := c.ReleaseToken(ctx, "tok", -1); !errors.Is(err, idemd.ErrInvalidRequest) {
		t.Fatalf("attempt -1: %v", err)
	}
}

func TestRetryHonoursRetryAfter(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(503)
			_, _ = w.Write([]byte(`{"status":503,"code":"unavailable","detail":"db"}`))
			return
		}
		_, _ = w.Write([]byte(`{"key":"v","version":4}`))
	}))
	defer srv.Close()
	c := idemd.New(srv.URL, "k", idemd.WithRetry(idemd.Retry{Attempts: 2, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}))
	t0 := time.Now()
	v, err := c.GetVersion(context.Background(), "v")
	if err != nil || v.Version != 4 || calls.Load() != 2 || time.Since(t0) < 950*time.Millisecond {
		t.Fatalf("%v %v calls=%d after %v", v, err, calls.Load(), time.Since(t0))
	}
}

func TestRunOncePanicReleases(t *testing.T) {
	c := liveClient(t)
	op := newOp(t, c)
	key := uniq("job")
	func() {
		defer func() { _ = recover() }()
		_, _ = c.RunOnce(context.Background(), idemd.Target{Operation: op, Key: key},
			func(context.Context, *idemd.Claimed) (idemd.Outcome, error) { panic("boom") }, nil)
	}()
	rec, err := c.GetKey(context.Background(), op, key)
	if err != nil || rec.State != "issued" {
		t.Fatalf("after a panic: %+v %v", rec, err)
	}
}
