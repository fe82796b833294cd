package batchapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// Error is a failed call to the Files or Batches API. Its message is safe
// to log and show: it never holds the token, the root URL (which may carry
// a credential) or the provider's body, only the status, the provider's
// error code and its message summarised.
type Error struct {
	// Op is what was asked: "upload", "create", "get", "cancel", "content".
	Op string
	// Status is the HTTP status, 0 when there was no answer (Connect, or a
	// connection that failed or timed out).
	Status int
	// Code and Type are the OpenAI error's code and type
	// ("token_limit_exceeded", "invalid_request_error"), "" if none.
	Code, Type string
	// Reason is the provider's message, summarised (Summarise); "" if none.
	Reason string
	// RequestID is the id the provider gave the call (x-request-id).
	RequestID string
	// RetryAfter is how long the provider asked to wait (retry-after-ms,
	// Retry-After), 0 if it did not say.
	RetryAfter time.Duration
	// Connect is set when no connection could be made: the request never
	// reached the provider, so even a create may be sent again.
	Connect bool
	// Err is the cause (a transport error, a decoding error), for errors.Is;
	// never printed raw.
	Err error
	msg string // what went wrong, without anything the server said
	// local: the request was never sent (a root or an id that is not one).
	local bool
	// cut: a 2xx whose body ended early (a dropped connection).
	cut bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("batch API " + e.Op + ": ")
	if e.Status != 0 {
		fmt.Fprintf(&b, "HTTP %d: ", e.Status)
	}
	b.WriteString(e.msg)
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %q", e.Reason)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request id %s)", e.RequestID)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Retryable reports whether the same call may succeed later: a 429 (but
// a spent quota), a 408, a 5xx, or no answer at all. A create or an
// upload is only safe to send again when the first never reached the
// provider (Connect): otherwise it may have been made, and be paid for,
// twice. The client itself retries only what is idempotent (get, content).
func (e *Error) Retryable() bool {
	switch {
	case e.local, e.Code == "insufficient_quota":
		return false
	case e.cut, e.Status == 0, e.Status == 408, e.Status == 429, e.Status >= 500:
		return true
	}
	return false
}

// Final reports whether no later call can succeed either: the token is
// rejected, the account cannot pay, the API is not there.
func (e *Error) Final() bool {
	return e.Outcome().StopsRun()
}

// Outcome maps the error to hfsent's outcome table, as a live call's would.
func (e *Error) Outcome() outcome.Code {
	switch {
	case e.local:
		return outcome.UpstreamEndpoint
	case e.Status == 0 && errors.Is(e.Err, errTimeout):
		return outcome.UpstreamTimeout
	case e.Status == 0, e.cut:
		return outcome.UpstreamFailed
	case e.Code == "insufficient_quota", e.Status == 402:
		return outcome.UpstreamQuota
	case e.Status == 401 || e.Status == 403:
		return outcome.UpstreamAuth
	case e.Status == 429:
		return outcome.UpstreamRateLimited
	case e.Status == 404:
		return outcome.UpstreamNotFound
	case e.Status == 405 || e.Status == 410 || e.Status >= 300 && e.Status < 400:
		return outcome.UpstreamEndpoint
	case e.Status == 408:
		return outcome.UpstreamTimeout
	case e.Status == 200:
		return outcome.UpstreamPayload
	case e.Status >= 400 && e.Status < 500:
		return outcome.UpstreamRequestRejected
	}
	return outcome.UpstreamFailed
}

// AsError returns err as an *Error when it is or wraps one.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

var errTimeout = errors.New("no answer in time")

// statusMsg says what a status means, without the server's words.
func statusMsg(code int) string {
	switch {
	case code == 401 || code == 403:
		return "token rejected"
	case code == 402:
		return "payment required"
	case code == 404:
		return "not found (does the provider offer the Batch API at this root?)"
	case code == 405:
		return "method not allowed (does the provider offer the Batch API at this root?)"
	case code == 408:
		return "request timeout"
	case code == 413:
		return "request too large"
	case code == 429:
		return "rate limited"
	case code >= 300 && code < 400:
		return "redirected; not followed"
	case code >= 400 && code < 500:
		return "request rejected"
	case code >= 500:
		return "server error"
	}
	return "unexpected status"
}

// maxErrBody bounds how much of a failed answer is read for its error.
const maxErrBody = 64 << 10

// statusError is the Error for a non-2xx answer whose first bytes are body.
func statusError(op string, resp *http.Response, body []byte, token string, now time.Time) *Error {
	e := &Error{Op: op, Status: resp.StatusCode, msg: statusMsg(resp.StatusCode), RequestID: clean(resp.Header.Get("X-Request-Id"), 100)}
	e.RetryAfter = retryAfter(resp.Header, now)
	var doc struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &doc) == nil && len(doc.Error) > 0 {
		var oe struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		var s string
		switch {
		case json.Unmarshal(doc.Error, &oe) == nil:
			e.Reason, e.Type = Summarise(oe.Message, token), clean(oe.Type, 100)
			if code, _, ok := readError(doc.Error); ok {
				e.Code = code
			}
		case json.Unmarshal(doc.Error, &s) == nil:
			e.Reason = Summarise(s, token)
		}
	}
	if e.Code == "insufficient_quota" {
		e.msg, e.RetryAfter = "quota exceeded: the account has no credit left", 0
	}
	return e
}

// retryAfter is the provider's retry hint: retry-after-ms (OpenAI's
// clients read it first), else Retry-After (seconds or an HTTP date).
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && ms <= 86400e3 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	return provider.ParseRetryAfter(h.Get("Retry-After"), now)
}
