package idemd

import (
	"encoding/base64"
	"encoding/json"
	"time"
)

// StoredResponse is an outcome as idemd stores and replays it: a status,
// headers and a body (JSON in Body, or raw bytes as BodyBase64).
type StoredResponse struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers"`
	Body       json.RawMessage   `json:"body,omitempty"`
	BodyBase64 string            `json:"body_base64,omitempty"`
}

// Bytes is the body's bytes: the raw bytes of BodyBase64, the compact JSON
// text of Body, or nothing.
func (r *StoredResponse) Bytes() []byte {
	if r == nil {
		return nil
	}
	if r.BodyBase64 != "" {
		b, err := base64.StdEncoding.DecodeString(r.BodyBase64)
		if err == nil {
			return b
		}
	}
	if len(r.Body) == 0 || string(r.Body) == "null" {
		return nil
	}
	return r.Body
}

// DecodeBody unmarshals the JSON body into v.
func (r *StoredResponse) DecodeBody(v any) error { return json.Unmarshal(r.Body, v) }

// Checkpoint is the latest recovery point left by an attempt.
type Checkpoint struct {
	Phase   string          `json:"phase"`
	Data    json.RawMessage `json:"data,omitempty"`
	Attempt int             `json:"attempt"`
}

// Outcome is what to store for a claim: a status, headers, and a JSON body
// (Body, any value json.Marshal accepts) or raw bytes (Content).
type Outcome struct {
	Status  int
	Headers map[string]string
	Body    any
	Content []byte
}

func (o Outcome) fields(m map[string]any) {
	st := o.Status
	if st == 0 {
		st = 200
	}
	m["status"] = st
	if len(o.Headers) > 0 {
		m["headers"] = o.Headers
	}
	if o.Content != nil {
		m["body_base64"] = base64.StdEncoding.EncodeToString(o.Content)
	} else if o.Body != nil {
		m["body"] = o.Body
	}
}

// IssuedToken is a token from Issue or IssueMany.
type IssuedToken struct {
	Token     string          `json:"token"`
	ID        string          `json:"id"`
	Operation string          `json:"operation"`
	Subject   string          `json:"subject"`
	ExpiresAt time.Time       `json:"expires_at"`
	Version   *int64          `json:"version,omitempty"`
	Raw       json.RawMessage `json:"-"`
}

// Claimed is a claim's answer: a new attempt to complete or release
// (Replayed false, Attempt, LeaseExpiresAt, and Checkpoint of an earlier
// attempt on a takeover), or the stored Response of a completed duplicate
// (Replayed true).
type Claimed struct {
	State          string          `json:"state"`
	ID             string          `json:"id,omitempty"`
	Attempt        int             `json:"attempt,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	Response       *StoredResponse `json:"response,omitempty"`
	Checkpoint     *Checkpoint     `json:"checkpoint,omitempty"`
	Replayed       bool            `json:"-"`
	Raw            json.RawMessage `json:"-"`
}

// Record is a record as introspection (tokens, caller keys) and the records
// API show it.
type Record struct {
	ID         string          `json:"id"`
	Operation  string          `json:"operation,omitempty"`
	Key        string          `json:"key,omitempty"`
	Subject    string          `json:"subject,omitempty"`
	State      string          `json:"state"`
	Attempt    int             `json:"attempt"`
	ExpiresAt  *time.Time      `json:"expires_at,omitempty"`
	ClaimedAt  *time.Time      `json:"claimed_at,omitempty"`
	Response   *StoredResponse `json:"response,omitempty"`
	Checkpoint *Checkpoint     `json:"checkpoint,omitempty"`
	Replays    *int64          `json:"replays,omitempty"`
	Raw        json.RawMessage `json:"-"`
}

// RecordPage is one page of ListRecords; NextCursor is "" on the last page.
type RecordPage struct {
	Records    []Record        `json:"records"`
	NextCursor string          `json:"-"`
	Raw        json.RawMessage `json:"-"`
}

// RecordFilter selects records for ListRecords (zero values are not sent).
type RecordFilter struct {
	Operation string
	State     string
	Subject   string
	OlderThan int // seconds since the claim
	Limit     int // 1..500
	Cursor    string
}

// RecordEvent is one entry of a record's audit trail.
type RecordEvent struct {
	At      time.Time `json:"at"`
	Event   string    `json:"event"`
	Attempt int       `json:"attempt"`
	Status  int       `json:"status,omitempty"`
	Phase   string    `json:"phase,omitempty"`
	By      string    `json:"by"`
}

// Result is the answer of complete, release, extend and checkpoint.
type Result struct {
	State          string          `json:"state,omitempty"`
	Attempt        int             `json:"attempt,omitempty"`
	Response       *StoredResponse `json:"response,omitempty"`
	ExpiresAt      *time.Time      `json:"expires_at,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	Checkpoint     *Checkpoint     `json:"checkpoint,omitempty"`
	Raw            json.RawMessage `json:"-"`
}

// Version is a version counter.
type Version struct {
	Key     string          `json:"key"`
	Version int64           `json:"version"`
	Raw     json.RawMessage `json:"-"`
}

// Operation is an operation's policy (PutOperation, GetOperation).
// Optional fields left nil or empty are not sent.
type Operation struct {
	Name                  string `json:"name,omitempty"`
	TokenTTLSeconds       int64  `json:"token_ttl_seconds"`
	RetentionSeconds      int64  `json:"retention_seconds"`
	LeaseSeconds          int64  `json:"lease_seconds"`
	VersionKey            string `json:"version_key,omitempty"`
	RequireVersion        *bool  `json:"require_version,omitempty"`
	WaitSeconds           *int   `json:"wait_seconds,omitempty"`
	AuditRetentionSeconds *int64 `json:"audit_retention_seconds,omitempty"`
	// Extra holds policy fields this client does not name; PutOperation
	// sends them as they are (Raw has every field of an answer).
	Extra map[string]any  `json:"-"`
	Raw   json.RawMessage `json:"-"`
}

// BatchClaimItem is one key of ClaimBatch.
type BatchClaimItem struct {
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Request     any    `json:"request,omitempty"`
	Subject     string `json:"subject,omitempty"`
}

// BatchClaimResult is one item of ClaimBatch's answer: Status and Code are
// what a single claim of that key would have answered (201 new, 200 with
// the stored Response, 409 request_in_progress, 400, 412, 422, ...).
type BatchClaimResult struct {
	Key            string          `json:"key"`
	Status         int             `json:"status"`
	Code           string          `json:"code,omitempty"`
	ID             string          `json:"id,omitempty"`
	Attempt        int             `json:"attempt,omitempty"`
	LeaseExpiresAt *time.Time      `json:"lease_expires_at,omitempty"`
	Response       *StoredResponse `json:"response,omitempty"`
	Checkpoint     *Checkpoint     `json:"checkpoint,omitempty"`
	Raw            json.RawMessage `json:"-"`
}

// BatchCompleteItem is one key of CompleteBatch.
type BatchCompleteItem struct {
	Key     string
	Attempt int
	Outcome Outcome
}

// BatchCompleteResult is one item of CompleteBatch's answer: 200 stored, or
// 409 lease_lost / not_in_progress.
type BatchCompleteResult struct {
	Key    string          `json:"key"`
	Status int             `json:"status"`
	Code   string          `json:"code,omitempty"`
	Raw    json.RawMessage `json:"-"`
}

// OK is true when the item was stored.
func (r BatchCompleteResult) OK() bool { return r.Status == 200 }

// Health is /healthz's or /readyz's answer.
type Health struct {
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}
