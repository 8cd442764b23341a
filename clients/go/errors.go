package idemd

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Code is a problem code of idemd's API ("fingerprint_mismatch", ...). Each
// code is also an error value, so that
//
//	errors.Is(err, idemd.ErrFingerprintMismatch)
//
// is true for any *Error carrying that code. Branch on codes, never on the
// detail text.
type Code string

func (c Code) Error() string { return "idemd: " + string(c) }

// The problem codes of the API reference, one sentinel per code.
const (
	ErrInvalidRequest           Code = "invalid_request"
	ErrIdempotencyKeyMissing    Code = "idempotency_key_missing"
	ErrTokenMalformed           Code = "token_malformed"
	ErrUnauthorized             Code = "unauthorized"
	ErrTokenInvalid             Code = "token_invalid"
	ErrTokenScopeMismatch       Code = "token_scope_mismatch"
	ErrNotFound                 Code = "not_found"
	ErrMethodNotAllowed         Code = "method_not_allowed"
	ErrRequestInProgress        Code = "request_in_progress"
	ErrLeaseLost                Code = "lease_lost"
	ErrNotInProgress            Code = "not_in_progress"
	ErrIdempotencyKeyInvalid    Code = "idempotency_key_invalid"
	ErrRecordNotFound           Code = "record_not_found"
	ErrCompletionConflict       Code = "completion_conflict"
	ErrTokenInUse               Code = "token_in_use"
	ErrTokenExpired             Code = "token_expired"
	ErrTokenRevoked             Code = "token_revoked"
	ErrVersionMismatch          Code = "version_mismatch"
	ErrPayloadTooLarge          Code = "payload_too_large"
	ErrUnsupportedMediaType     Code = "unsupported_media_type"
	ErrFingerprintMismatch      Code = "fingerprint_mismatch"
	ErrOperationUnknown         Code = "operation_unknown"
	ErrVersionRequired          Code = "version_required"
	ErrRateLimited              Code = "rate_limited"
	ErrUnavailable              Code = "unavailable"
	ErrCorsOriginDenied         Code = "cors_origin_denied"
	ErrUpstreamUnavailable      Code = "upstream_unavailable"
	ErrUpstreamInvalid          Code = "upstream_invalid"
	ErrUpstreamTimeout          Code = "upstream_timeout"
	ErrUpstreamAnswerUnstorable Code = "upstream_answer_unstorable"
	ErrInternal                 Code = "internal"
)

// Codes lists every problem code the client knows (each has its sentinel).
var Codes = []Code{
	ErrInvalidRequest, ErrIdempotencyKeyMissing, ErrTokenMalformed, ErrUnauthorized,
	ErrTokenInvalid, ErrTokenScopeMismatch, ErrNotFound, ErrMethodNotAllowed,
	ErrRequestInProgress, ErrLeaseLost, ErrNotInProgress, ErrIdempotencyKeyInvalid,
	ErrRecordNotFound, ErrCompletionConflict, ErrTokenInUse, ErrTokenExpired,
	ErrTokenRevoked, ErrVersionMismatch, ErrPayloadTooLarge, ErrUnsupportedMediaType,
	ErrFingerprintMismatch, ErrOperationUnknown, ErrVersionRequired, ErrRateLimited,
	ErrUnavailable, ErrCorsOriginDenied, ErrUpstreamUnavailable, ErrUpstreamInvalid,
	ErrUpstreamTimeout, ErrUpstreamAnswerUnstorable, ErrInternal,
}

// ProblemTitle is the title idemd gives a problem of STATUS (RFC 9110's
// reason phrase: 413 "Content Too Large", 422 "Unprocessable Content"),
// for the problems the client makes itself; an answer's own problem is
// passed on unchanged.
func ProblemTitle(status int) string {
	switch status {
	case 413:
		return "Content Too Large"
	case 422:
		return "Unprocessable Content"
	}
	if t := http.StatusText(status); t != "" {
		return t
	}
	return "Error"
}

// ErrorFor is the sentinel of a problem code (for errors.Is), or nil when
// the client does not know the code.
func ErrorFor(code string) error {
	for _, c := range Codes {
		if string(c) == code {
			return c
		}
	}
	return nil
}

// Error is a refusal from idemd: an RFC 9457 problem (Code set), or an
// answer that is not one (Code ""). Refusals the client makes itself before
// sending (an invalid caller key, a missing attempt) are *Error values too,
// with the status and code idemd would have answered.
type Error struct {
	Status        int           // HTTP status
	Code          Code          // the problem code; "" when the answer was not a problem
	Detail        string        // human-readable explanation
	RetryAfter    time.Duration // the Retry-After header (valid when HasRetryAfter)
	HasRetryAfter bool
	Problem       map[string]any // the whole problem object
	Header        http.Header    // the answer's headers (nil for client-side refusals)
}

func (e *Error) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("idemd: %d %s: %s", e.Status, e.Code, e.Detail)
	}
	return fmt.Sprintf("idemd: %d: %s", e.Status, e.Detail)
}

// Is makes errors.Is(err, idemd.ErrXxx) true for an *Error of that code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && e.Code != "" && c == e.Code
}

// CurrentVersion is the version counter's value from the answer's ETag (a
// 412 version_mismatch carries it); ok is false when there was none.
func (e *Error) CurrentVersion() (v int64, ok bool) {
	if e.Header == nil {
		return 0, false
	}
	return ParseETag(e.Header.Get("ETag"))
}

// TransportError is a call that got no HTTP answer: connection refused or
// reset, timeout, a malformed reply. Sent is false when the request
// certainly never reached idemd (connection refused): only then is it
// retried.
type TransportError struct {
	Method, Path string
	Sent         bool
	Err          error
}

func (e *TransportError) Error() string {
	return fmt.Sprintf("idemd: %s %s: %v", e.Method, e.Path, e.Err)
}

func (e *TransportError) Unwrap() error { return e.Err }

// AsError returns err's *Error (through wrapping), or nil.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// ParseETag reads a strong ETag "N"; weak or malformed values are not versions.
func ParseETag(v string) (int64, bool) {
	v = strings.TrimSpace(v)
	if len(v) < 3 || v[0] != '"' || v[len(v)-1] != '"' {
		return 0, false
	}
	n, err := strconv.ParseInt(v[1:len(v)-1], 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// ETag is version N as a strong entity tag, "N", for If-Match.
func ETag(n int64) string { return `"` + strconv.FormatInt(n, 10) + `"` }

func parseRetryAfter(v string) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := time.Until(t)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

func errorFor(status int, header http.Header, body []byte) *Error {
	e := &Error{Status: status, Header: header}
	var problem map[string]any
	if json.Unmarshal(body, &problem) == nil && problem != nil {
		e.Problem = problem
		if c, ok := problem["code"].(string); ok {
			e.Code = Code(c)
		}
		if d, ok := problem["detail"].(string); ok {
			e.Detail = d
		}
	}
	if e.Detail == "" {
		if e.Problem == nil && len(body) > 0 {
			b := body
			if len(b) > 200 {
				b = b[:200]
			}
			e.Detail = string(b)
		} else {
			e.Detail = fmt.Sprintf("HTTP %d", status)
		}
	}
	e.RetryAfter, e.HasRetryAfter = parseRetryAfter(header.Get("Retry-After"))
	return e
}

// CheckKey returns nil if idemd would accept key as a caller key (1..255
// bytes of visible ASCII, 0x21-0x7E), else the 400 idempotency_key_invalid
// idemd would answer. Every call taking a caller key checks it before sending.
func CheckKey(key string) error {
	if len(key) < 1 || len(key) > 255 {
		return &Error{Status: 400, Code: ErrIdempotencyKeyInvalid,
			Detail: fmt.Sprintf("a caller key is 1..255 bytes, got %d", len(key))}
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x21 || key[i] > 0x7e {
			return &Error{Status: 400, Code: ErrIdempotencyKeyInvalid,
				Detail: "a caller key holds only visible ASCII (0x21-0x7E)"}
		}
	}
	return nil
}

func checkAttempt(attempt int) error {
	if attempt < 1 || attempt > 2147483647 {
		d := "field attempt must be an integer from 1 to 2147483647"
		if attempt == 0 {
			d = "field attempt is required (the attempt of the claim being finished)"
		}
		return &Error{Status: 400, Code: ErrInvalidRequest, Detail: d}
	}
	return nil
}
