package idemd_test

// The clients' conformance suite (clients/conformance/*.json, format in its
// README.md), run against the Go client: one subtest per scenario.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"idemd.dev/go/idemd"
)

type scenarioError struct{ msg string }

func (e *scenarioError) Error() string { return e.msg }

func failf(format string, a ...any) { panic(&scenarioError{fmt.Sprintf(format, a...)}) }

func show(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 600 {
		b = b[:600]
	}
	return string(b)
}

// ---------------------------------------------------------------- stub server

type stubReq struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    any               `json:"body"`
}

type stubServer struct {
	mu       sync.Mutex
	answers  []map[string]any
	requests []stubReq
	srv      *httptest.Server
}

func newStub() *stubServer {
	s := &stubServer{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body any
		if len(raw) > 0 {
			if json.Unmarshal(raw, &body) != nil {
				body = string(raw)
			}
		}
		h := map[string]string{}
		for k, v := range r.Header {
			h[strings.ToLower(k)] = strings.Join(v, ", ")
		}
		s.mu.Lock()
		s.requests = append(s.requests, stubReq{r.Method, r.URL.RequestURI(), h, body})
		var a map[string]any
		switch {
		case len(s.answers) > 1:
			a, s.answers = s.answers[0], s.answers[1:]
		case len(s.answers) == 1:
			a = s.answers[0]
		default:
			a = map[string]any{"status": 599.0, "body_text": "the scenario gave the stub no answer"}
		}
		s.mu.Unlock()
		status := int(a["status"].(float64))
		hasType := false
		if hs, ok := a["headers"].(map[string]any); ok {
			for k, v := range hs {
				w.Header().Set(k, fmt.Sprint(v))
				hasType = hasType || strings.EqualFold(k, "content-type")
			}
		}
		var payload []byte
		if b, ok := a["body"]; ok {
			payload, _ = json.Marshal(b)
			if !hasType {
				if status >= 400 {
					w.Header().Set("Content-Type", "application/problem+json")
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
			}
		} else if t, ok := a["body_text"].(string); ok {
			payload = []byte(t)
			if !hasType {
				w.Header().Set("Content-Type", "text/plain")
			}
		}
		w.WriteHeader(status)
		_, _ = w.Write(payload)
	}))
	return s
}

func (s *stubServer) arm(answers any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers = nil
	s.requests = nil
	if list, ok := answers.([]any); ok {
		for _, a := range list {
			s.answers = append(s.answers, a.(map[string]any))
		}
	}
}

func (s *stubServer) taken() []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []any
	b, _ := json.Marshal(s.requests)
	_ = json.Unmarshal(b, &out)
	return out
}

// ---------------------------------------------------------------- patterns and variables

var varRe = regexp.MustCompile(`\$\{([A-Za-z0-9_.]+)\}`)
var wholeRe = regexp.MustCompile(`^\$\{([A-Za-z0-9_.]+)\}$`)

func lookup(env map[string]any, name string) any {
	v, ok := env[name]
	if !ok {
		failf("undefined variable ${%s}", name)
	}
	return v
}

func expand(v any, env map[string]any) any {
	switch x := v.(type) {
	case string:
		if m := wholeRe.FindStringSubmatch(x); m != nil {
			return lookup(env, m[1])
		}
		return varRe.ReplaceAllStringFunc(x, func(s string) string {
			val := lookup(env, varRe.FindStringSubmatch(s)[1])
			switch y := val.(type) {
			case string:
				return y
			case float64, bool:
				return fmt.Sprint(y)
			default:
				b, _ := json.Marshal(y)
				return string(b)
			}
		})
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = expand(e, env)
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = expand(e, env)
		}
		return out
	}
	return v
}

func atPath(v any, path string) any {
	cur := v
	for _, part := range strings.Split(path, ".") {
		switch x := cur.(type) {
		case []any:
			var i int
			if _, err := fmt.Sscanf(part, "%d", &i); err != nil || i < 0 || i >= len(x) {
				failf("save: no %s in %s", path, show(v))
			}
			cur = x[i]
		case map[string]any:
			n, ok := x[part]
			if !ok {
				failf("save: no %s in %s", path, show(v))
			}
			cur = n
		default:
			failf("save: no %s in %s", path, show(v))
		}
	}
	return cur
}

func deepEq(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !deepEq(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !deepEq(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return a == b
}

func isObj(v any) bool { _, ok := v.(map[string]any); return ok }

func match(p, a any, where string) string {
	if m, ok := p.(map[string]any); ok {
		if len(m) == 1 {
			for op, arg := range m {
				if strings.HasPrefix(op, "$") {
					var ok bool
					switch op {
					case "$type":
						switch arg {
						case "string":
							_, ok = a.(string)
						case "number":
							_, ok = a.(float64)
						case "integer":
							f, isNum := a.(float64)
							ok = isNum && f == math.Trunc(f)
						case "boolean":
							_, ok = a.(bool)
						case "object":
							ok = isObj(a)
						case "array":
							_, ok = a.([]any)
						case "null":
							ok = a == nil
						}
					case "$regex":
						s, isStr := a.(string)
						ok = isStr && regexp.MustCompile(arg.(string)).MatchString(s)
					case "$gte":
						f, isNum := a.(float64)
						ok = isNum && f >= arg.(float64)
					case "$lte":
						f, isNum := a.(float64)
						ok = isNum && f <= arg.(float64)
					case "$len":
						switch x := a.(type) {
						case []any:
							ok = float64(len(x)) == arg.(float64)
						case string:
							ok = float64(len(x)) == arg.(float64)
						}
					case "$eq":
						ok = deepEq(arg, a)
					case "$not_eq":
						ok = !deepEq(arg, a)
					case "$absent":
						ok = a == nil
					default:
						failf("unknown operator %s", op)
					}
					if ok {
						return ""
					}
					return fmt.Sprintf("%s: %s does not satisfy %s", where, show(a), show(p))
				}
			}
		}
		obj, ok := a.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: expected an object, got %s", where, show(a))
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			sub := m[k]
			if sm, ok := sub.(map[string]any); ok && len(sm) == 1 && sm["$absent"] == true {
				if obj[k] != nil {
					return fmt.Sprintf("%s.%s: expected absent, got %s", where, k, show(obj[k]))
				}
				continue
			}
			v, ok := obj[k]
			if !ok {
				return fmt.Sprintf("%s.%s: missing", where, k)
			}
			if d := match(sub, v, where+"."+k); d != "" {
				return d
			}
		}
		return ""
	}
	if l, ok := p.([]any); ok {
		al, ok := a.([]any)
		if !ok || len(al) != len(l) {
			return fmt.Sprintf("%s: expected an array of %d, got %s", where, len(l), show(a))
		}
		for i := range l {
			if d := match(l[i], al[i], fmt.Sprintf("%s[%d]", where, i)); d != "" {
				return d
			}
		}
		return ""
	}
	if deepEq(p, a) {
		return ""
	}
	return fmt.Sprintf("%s: expected %s, got %s", where, show(p), show(a))
}

// ---------------------------------------------------------------- ops

var errRetryable = errors.New("conformance: retryable failure")
var errFinal = errors.New("conformance: final failure")

func str(a map[string]any, k string) string { s, _ := a[k].(string); return s }
func num(a map[string]any, k string) int {
	f, _ := a[k].(float64)
	return int(f)
}

func raw(b json.RawMessage) any {
	var v any
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, &v); err != nil {
		failf("undecodable answer %s", b)
	}
	return v
}

func ifMatch(v any) string {
	switch x := v.(type) {
	case float64:
		return idemd.ETag(int64(x))
	case string:
		return x
	}
	return ""
}

func claimOpts(a map[string]any) *idemd.ClaimOptions {
	o := &idemd.ClaimOptions{Fingerprint: str(a, "fingerprint"), Subject: str(a, "subject")}
	if r, ok := a["request"]; ok {
		o.Request = r
	}
	if v, ok := a["if_match"]; ok {
		o.IfMatch = ifMatch(v)
	}
	if w, ok := a["wait"].(float64); ok {
		o.Wait = time.Duration(w) * time.Second
	}
	return o
}

func outcomeOf(a map[string]any) idemd.Outcome {
	o := idemd.Outcome{Status: num(a, "status")}
	if b, ok := a["body"]; ok {
		o.Body = b
	}
	if h, ok := a["headers"].(map[string]any); ok {
		o.Headers = map[string]string{}
		for k, v := range h {
			o.Headers[k] = fmt.Sprint(v)
		}
	}
	if s, ok := a["body_base64"].(string); ok {
		o.Content, _ = base64.StdEncoding.DecodeString(s)
	}
	return o
}

func claimed(c *idemd.Claimed, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	m := raw(c.Raw).(map[string]any)
	m["replayed"] = c.Replayed
	return m, nil
}

func resRaw(r *idemd.Result, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return raw(r.Raw), nil
}

func recRaw(r *idemd.Record, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return raw(r.Raw), nil
}

func opRaw(r *idemd.Operation, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return raw(r.Raw), nil
}

func storedJSON(r idemd.StoredResponse) any {
	b, _ := json.Marshal(r)
	var v any
	_ = json.Unmarshal(b, &v)
	if m, ok := v.(map[string]any); ok && m["headers"] == nil {
		m["headers"] = map[string]any{}
	}
	return v
}

func runOp(ctx context.Context, c *idemd.Client, op string, a map[string]any) (any, error) {
	switch op {
	case "sleep":
		time.Sleep(time.Duration(num(a, "ms")) * time.Millisecond)
		return nil, nil
	case "put_operation":
		p := idemd.Operation{Extra: map[string]any{}}
		for k, v := range a {
			if k != "name" {
				p.Extra[k] = v
			}
		}
		p.TokenTTLSeconds = int64(num(a, "token_ttl_seconds"))
		p.RetentionSeconds = int64(num(a, "retention_seconds"))
		p.LeaseSeconds = int64(num(a, "lease_seconds"))
		return opRaw(c.PutOperation(ctx, str(a, "name"), p))
	case "get_operation":
		return opRaw(c.GetOperation(ctx, str(a, "name")))
	case "list_operations":
		ops, err := c.ListOperations(ctx)
		if err != nil {
			return nil, err
		}
		l := []any{}
		for _, o := range ops {
			l = append(l, raw(o.Raw))
		}
		return map[string]any{"operations": l}, nil
	case "issue":
		t, err := c.Issue(ctx, str(a, "operation"), str(a, "subject"), &idemd.IssueOptions{TTLSeconds: num(a, "ttl_seconds")})
		if err != nil {
			return nil, err
		}
		return raw(t.Raw), nil
	case "issue_many":
		ts, err := c.IssueMany(ctx, str(a, "operation"), str(a, "subject"), num(a, "count"), &idemd.IssueOptions{TTLSeconds: num(a, "ttl_seconds")})
		if err != nil {
			return nil, err
		}
		l := []any{}
		for _, t := range ts {
			l = append(l, raw(t.Raw))
		}
		return map[string]any{"tokens": l}, nil
	case "introspect":
		return recRaw(c.Introspect(ctx, str(a, "token")))
	case "revoke":
		return nil, c.Revoke(ctx, str(a, "token"))
	case "claim_token":
		return claimed(c.ClaimToken(ctx, str(a, "token"), claimOpts(a)))
	case "complete_token":
		return resRaw(c.CompleteToken(ctx, str(a, "token"), num(a, "attempt"), outcomeOf(a)))
	case "release_token":
		return resRaw(c.ReleaseToken(ctx, str(a, "token"), num(a, "attempt")))
	case "extend_token":
		return resRaw(c.ExtendToken(ctx, str(a, "token"), num(a, "attempt"), num(a, "lease_seconds")))
	case "checkpoint_token":
		return resRaw(c.CheckpointToken(ctx, str(a, "token"), num(a, "attempt"), str(a, "phase"), a["data"]))
	case "claim_key":
		return claimed(c.ClaimKey(ctx, str(a, "operation"), str(a, "key"), claimOpts(a)))
	case "scoped_key":
		h := http.Header{}
		hs, _ := a["headers"].(map[string]any)
		for k, v := range hs {
			h.Set(k, v.(string))
		}
		names := idemd.DefaultScopeHeaders
		if sh, ok := a["scope_headers"].([]any); ok {
			names = []string{}
			for _, n := range sh {
				names = append(names, n.(string))
			}
		}
		k, err := idemd.ScopedKey(str(a, "key"), h, names)
		if err != nil {
			return nil, err
		}
		return map[string]any{"key": k}, nil
	case "complete_key":
		return resRaw(c.CompleteKey(ctx, str(a, "operation"), str(a, "key"), num(a, "attempt"), outcomeOf(a)))
	case "release_key":
		return resRaw(c.ReleaseKey(ctx, str(a, "operation"), str(a, "key"), num(a, "attempt")))
	case "extend_key":
		return resRaw(c.ExtendKey(ctx, str(a, "operation"), str(a, "key"), num(a, "attempt"), num(a, "lease_seconds")))
	case "checkpoint_key":
		return resRaw(c.CheckpointKey(ctx, str(a, "operation"), str(a, "key"), num(a, "attempt"), str(a, "phase"), a["data"]))
	case "get_key":
		return recRaw(c.GetKey(ctx, str(a, "operation"), str(a, "key")))
	case "claim_batch":
		var items []idemd.BatchClaimItem
		for _, x := range a["items"].([]any) {
			m := x.(map[string]any)
			items = append(items, idemd.BatchClaimItem{Key: str(m, "key"), Fingerprint: str(m, "fingerprint"),
				Request: m["request"], Subject: str(m, "subject")})
		}
		rs, err := c.ClaimBatch(ctx, str(a, "operation"), items)
		if err != nil {
			return nil, err
		}
		l := []any{}
		for _, r := range rs {
			l = append(l, raw(r.Raw))
		}
		return map[string]any{"items": l}, nil
	case "complete_batch":
		var items []idemd.BatchCompleteItem
		for _, x := range a["items"].([]any) {
			m := x.(map[string]any)
			items = append(items, idemd.BatchCompleteItem{Key: str(m, "key"), Attempt: num(m, "attempt"), Outcome: outcomeOf(m)})
		}
		rs, err := c.CompleteBatch(ctx, str(a, "operation"), items)
		if err != nil {
			return nil, err
		}
		l := []any{}
		for _, r := range rs {
			l = append(l, raw(r.Raw))
		}
		return map[string]any{"items": l}, nil
	case "get_version":
		v, err := c.GetVersion(ctx, str(a, "key"))
		if err != nil {
			return nil, err
		}
		return raw(v.Raw), nil
	case "bump_version":
		n, err := c.BumpVersion(ctx, str(a, "key"), ifMatch(a["if_match"]))
		if err != nil {
			return nil, err
		}
		return map[string]any{"version": float64(n)}, nil
	case "get_record":
		return recRaw(c.GetRecord(ctx, str(a, "id")))
	case "record_events":
		evs, err := c.RecordEvents(ctx, str(a, "id"))
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(map[string]any{"events": evs})
		return raw(b), nil
	case "list_records":
		p, err := c.ListRecords(ctx, idemd.RecordFilter{Operation: str(a, "operation"), State: str(a, "state"),
			Subject: str(a, "subject"), OlderThan: num(a, "older_than"), Limit: num(a, "limit"), Cursor: str(a, "cursor")})
		if err != nil {
			return nil, err
		}
		return raw(p.Raw), nil
	case "run_once":
		spec, _ := a["handler"].(map[string]any)
		ran := false
		fn := func(ctx context.Context, _ *idemd.Claimed) (idemd.Outcome, error) {
			ran = true
			switch spec["fail"] {
			case "release":
				return idemd.Outcome{}, errRetryable
			case "final":
				return idemd.Outcome{}, idemd.Final(errFinal)
			}
			return outcomeOf(spec), nil
		}
		o := &idemd.RunOptions{ClaimOptions: *claimOpts(a)}
		r, err := c.RunOnce(ctx, idemd.Target{Operation: str(a, "operation"), Key: str(a, "key"), Token: str(a, "token")}, fn, o)
		if err != nil {
			return nil, err
		}
		return map[string]any{"ran": ran, "replayed": r.Replayed, "response": storedJSON(r.Response)}, nil
	case "consume":
		return consume(ctx, c, a)
	}
	failf("unknown op %s", op)
	return nil, nil
}

func consume(ctx context.Context, c *idemd.Client, a map[string]any) (any, error) {
	var msgs []map[string]any
	withRequest := false
	for _, m := range a["messages"].([]any) {
		mm := m.(map[string]any)
		msgs = append(msgs, mm)
		_, has := mm["request"]
		withRequest = withRequest || has
	}
	spec, _ := a["handler"].(map[string]any)
	failOn := map[string]string{}
	for _, kind := range []string{"release", "final"} {
		if l, ok := spec[kind].([]any); ok {
			for _, k := range l {
				failOn[k.(string)] = kind
			}
		}
	}
	var mu sync.Mutex
	handled := []string{}
	o := idemd.ConsumeOptions[map[string]any]{
		Key: func(m map[string]any) string { return str(m, "key") },
		Handler: func(ctx context.Context, m map[string]any, _ idemd.BatchClaimResult) (idemd.Outcome, error) {
			k := str(m, "key")
			mu.Lock()
			handled = append(handled, k)
			mu.Unlock()
			switch failOn[k] {
			case "release":
				return idemd.Outcome{}, errRetryable
			case "final":
				return idemd.Outcome{}, idemd.Final(errFinal)
			}
			return idemd.Outcome{Status: 200, Body: map[string]any{"handled": k}}, nil
		},
	}
	if withRequest {
		o.Request = func(m map[string]any) any { return m["request"] }
	}
	outs, err := idemd.Consume(ctx, c, str(a, "operation"), msgs, o)
	if err != nil {
		return nil, err
	}
	sort.Strings(handled)
	rows := []any{}
	for _, x := range outs {
		row := map[string]any{"key": x.Key, "outcome": x.Outcome, "retry": x.Retry, "status": nil, "code": nil}
		if x.Status != 0 {
			row["status"] = float64(x.Status)
		}
		if x.Code != "" {
			row["code"] = x.Code
		}
		if x.Response != nil {
			row["response"] = storedJSON(*x.Response)
		}
		rows = append(rows, row)
	}
	hl := []any{}
	for _, h := range handled {
		hl = append(hl, h)
	}
	return map[string]any{"handled": hl, "outcomes": rows}, nil
}

// ---------------------------------------------------------------- the runner

func checkError(p map[string]any, err error) string {
	if p["handler"] == true {
		if errors.Is(err, errRetryable) || errors.Is(err, errFinal) {
			return ""
		}
		return fmt.Sprintf("expected the handler's own error, got %v", err)
	}
	e := idemd.AsError(err)
	if e == nil {
		return fmt.Sprintf("expected an *idemd.Error, got %T %v", err, err)
	}
	if code, ok := p["code"]; ok {
		if code == nil {
			if e.Code != "" {
				return fmt.Sprintf("expected a non-problem error, got %v", err)
			}
		} else {
			sentinel := idemd.ErrorFor(code.(string))
			if sentinel == nil {
				return fmt.Sprintf("the client has no sentinel for %s", code)
			}
			if !errors.Is(err, sentinel) || string(e.Code) != code {
				return fmt.Sprintf("expected %s, got %v", code, err)
			}
		}
	}
	if s, ok := p["status"].(float64); ok && int(s) != e.Status {
		return fmt.Sprintf("expected status %v, got %d (%v)", s, e.Status, err)
	}
	if ra, ok := p["retry_after"].(float64); ok && (!e.HasRetryAfter || e.RetryAfter != time.Duration(ra*float64(time.Second))) {
		return fmt.Sprintf("expected retry_after %v, got %v (%v)", ra, e.RetryAfter, e.HasRetryAfter)
	}
	if pp, ok := p["problem"]; ok {
		if r := match(pp, any(e.Problem), "$.error.problem"); r != "" {
			return r
		}
	}
	if cv, ok := p["current_version"].(float64); ok {
		v, has := e.CurrentVersion()
		if !has || float64(v) != cv {
			return fmt.Sprintf("expected current_version %v, got %d", cv, v)
		}
	}
	return ""
}

func only(m map[string]any, what string, allowed ...string) {
	for k := range m {
		ok := false
		for _, a := range allowed {
			ok = ok || a == k
		}
		if !ok {
			failf("%s: unknown field %s", what, k)
		}
	}
}

type outcome struct {
	value any
	err   error
	end   time.Time
}

func runScenario(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var sc map[string]any
	if err := json.Unmarshal(data, &sc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer func() {
		if r := recover(); r != nil {
			if se, ok := r.(*scenarioError); ok {
				t.Fatal(se.msg)
			}
			panic(r)
		}
	}()
	only(sc, "scenario", "name", "description", "clients", "steps")
	if sc["name"] != strings.TrimSuffix(filepath.Base(path), ".json") {
		failf("name %v is not the file's name", sc["name"])
	}
	rb := make([]byte, 6)
	_, _ = rand.Read(rb)
	env := map[string]any{"run": "c" + hex.EncodeToString(rb), "run_long_key": strings.Repeat("k", 256), "run_max_key": strings.Repeat("k", 255)}
	configs := map[string]any{"default": map[string]any{}}
	if cs, ok := sc["clients"].(map[string]any); ok {
		for k, v := range cs {
			configs[k] = v
		}
	}
	var stub *stubServer
	type cl struct {
		c      *idemd.Client
		isStub bool
	}
	clients := map[string]cl{}
	for name, v := range configs {
		cfg := v.(map[string]any)
		only(cfg, "client "+name, "server", "api_key", "retry")
		server, _ := cfg["server"].(string)
		if server == "" {
			server = "main"
		}
		var url string
		switch server {
		case "stub":
			if stub == nil {
				stub = newStub()
				defer stub.srv.Close()
			}
			url = stub.srv.URL
		case "main":
			url = os.Getenv("IDEMD_URL")
		case "limited":
			url = os.Getenv("IDEMD_LIMITED_URL")
		default:
			failf("client %s: unknown server %s", name, server)
		}
		key := os.Getenv("IDEMD_API_KEY")
		switch k := cfg["api_key"].(type) {
		case string:
			key = map[string]string{"acme": os.Getenv("IDEMD_API_KEY"), "globex": os.Getenv("IDEMD_API_KEY_2"), "none": ""}[k]
		case map[string]any:
			key = str(k, "literal")
		}
		r := map[string]any{"attempts": 3.0, "base_delay_ms": 10.0, "max_delay_ms": 100.0}
		if rr, ok := cfg["retry"].(map[string]any); ok {
			for k, v := range rr {
				r[k] = v
			}
		}
		retry := idemd.Retry{Attempts: num(r, "attempts"), BaseDelay: time.Duration(num(r, "base_delay_ms")) * time.Millisecond,
			MaxDelay: time.Duration(num(r, "max_delay_ms")) * time.Millisecond}
		clients[name] = cl{idemd.New(url, key, idemd.WithRetry(retry), idemd.WithTimeout(90*time.Second)), server == "stub"}
	}
	type bg struct {
		ch     chan outcome
		start  time.Time
		isStub bool
	}
	background := map[string]bg{}
	ctx := context.Background()
	for i, s := range sc["steps"].([]any) {
		step := s.(map[string]any)
		where := fmt.Sprintf("step %d (%v)", i+1, step["op"])
		only(step, where, "op", "args", "client", "stub", "expect", "save", "background", "await", "note")
		expect, _ := expand(step["expect"], env).(map[string]any)
		if expect == nil {
			expect = map[string]any{}
		}
		only(expect, where+" expect", "result", "error", "requests", "sent", "min_elapsed_ms", "max_elapsed_ms")
		var out outcome
		var start time.Time
		var isStub bool
		if h, ok := step["await"].(string); ok {
			b, ok := background[h]
			if !ok {
				failf("%s: no background call %s", where, h)
			}
			delete(background, h)
			out, start, isStub = <-b.ch, b.start, b.isStub
		} else {
			cname, _ := step["client"].(string)
			if cname == "" {
				cname = "default"
			}
			c, ok := clients[cname]
			if !ok {
				failf("%s: no client %s", where, cname)
			}
			isStub = c.isStub
			args, _ := expand(step["args"], env).(map[string]any)
			if args == nil {
				args = map[string]any{}
			}
			if isStub {
				stub.arm(expand(step["stub"], env))
			} else if _, ok := step["stub"]; ok {
				failf("%s: stub answers for a client that is not on the stub", where)
			}
			op := step["op"].(string)
			start = time.Now()
			run := func() outcome {
				v, err := runOp(ctx, c.c, op, args)
				return outcome{v, err, time.Now()}
			}
			if h, ok := step["background"].(string); ok {
				ch := make(chan outcome, 1)
				go func() { ch <- run() }()
				background[h] = bg{ch, start, isStub}
				continue
			}
			out = run()
		}
		elapsed := out.end.Sub(start)
		if pe, ok := expect["error"].(map[string]any); ok {
			if out.err == nil {
				failf("%s: expected an error %s, got result %s", where, show(pe), show(out.value))
			}
			if d := checkError(pe, out.err); d != "" {
				failf("%s: %s", where, d)
			}
		} else {
			if out.err != nil {
				failf("%s: unexpected error %T: %v", where, out.err, out.err)
			}
			b, _ := json.Marshal(out.value)
			var result any
			_ = json.Unmarshal(b, &result)
			if pr, ok := expect["result"]; ok {
				if d := match(pr, result, "$"); d != "" {
					failf("%s: result %s\n  %s", where, show(result), d)
				}
			}
			if sv, ok := step["save"].(map[string]any); ok {
				for k, p := range sv {
					env[k] = atPath(result, p.(string))
				}
			}
		}
		_, wantReq := expect["requests"]
		_, wantSent := expect["sent"]
		if wantReq || wantSent {
			if !isStub {
				failf("%s: requests/sent need a stub client", where)
			}
			taken := stub.taken()
			if n, ok := expect["requests"].(float64); ok && int(n) != len(taken) {
				var seen []string
				for _, r := range taken {
					m := r.(map[string]any)
					seen = append(seen, fmt.Sprint(m["method"], " ", m["path"]))
				}
				failf("%s: expected %v requests, the stub got %d: %v", where, n, len(taken), seen)
			}
			if sent, ok := expect["sent"].([]any); ok {
				for j, p := range sent {
					if j >= len(taken) {
						failf("%s: request %d was not sent", where, j+1)
					}
					if d := match(p, taken[j], fmt.Sprintf("request[%d]", j)); d != "" {
						failf("%s: %s", where, d)
					}
				}
			}
		}
		ms := float64(elapsed) / float64(time.Millisecond)
		if v, ok := expect["min_elapsed_ms"].(float64); ok && ms < v {
			failf("%s: took %.0f ms, expected at least %v", where, ms, v)
		}
		if v, ok := expect["max_elapsed_ms"].(float64); ok && ms > v {
			failf("%s: took %.0f ms, expected at most %v", where, ms, v)
		}
	}
	if len(background) > 0 {
		failf("background calls never awaited")
	}
}

func TestConformance(t *testing.T) {
	if os.Getenv("IDEMD_URL") == "" || os.Getenv("IDEMD_API_KEY") == "" {
		t.Skip("IDEMD_URL and IDEMD_API_KEY are not set (run tests/clients.sh)")
	}
	dir := filepath.Join("..", "conformance")
	if src := os.Getenv("IDEMD_SOURCE_DIR"); src != "" {
		dir = filepath.Join(src, "clients", "conformance")
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(files)
	if len(files) < 5 {
		t.Fatalf("no scenarios in %s", dir)
	}
	for _, f := range files {
		f := f
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) { runScenario(t, f) })
	}
}
