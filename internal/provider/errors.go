package provider

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
)

// Error is a provider failure already mapped to the outcome table. Its
// message is safe to write to results and logs: it never holds a response
// body or a token.
type Error struct {
	Outcome outcome.Code
	// Status is the upstream HTTP status, 0 when there was no answer.
	Status int
	// RetryAfter is how long the provider asked us to wait (Retry-After,
	// the RateLimit header, or a loading model's estimated_time); 0 if none.
	RetryAfter time.Duration
	// Loading is set for a 503 "model is currently loading".
	Loading bool
	// Connect is set when no connection could be made (refused, no such
	// host, TLS handshake, connect timeout): the request never reached the
	// provider.
	Connect bool
	// Unreachable is set when no call has ever been answered and every one
	// so far failed to connect: the run cannot succeed.
	Unreachable bool
	// Cold is set for a 503 from an endpoint that may be scaled to zero
	// (any but the router) and has not answered yet: its replica may be
	// starting. Ask again WithScaleUp.
	Cold bool
	// Down is set on the error that stops a batch when nothing has
	// succeeded since the start and the breaker's probes failed too: the
	// provider is down, not having a bad day. Msg names the commonest cause.
	Down bool
	// Msg is a short, safe summary.
	Msg string
	// Reason is the server's own reason (the body's "error", "message", ...),
	// summarised: one line, at most MaxReason characters, no token; "" if
	// none. RequestID is the id the server gave the call (x-request-id or
	// x-inference-id), "" if none.
	Reason, RequestID string
	// Usage is what the failed call cost, when the server said (a chat
	// answer that named no label was still paid for).
	Usage Usage
	// Answer is what a chat model answered when it named no label (at most
	// maxAnswer bytes), for the row's second call to quote back to it; it
	// is never shown (Msg quotes it summarised).
	Answer string
	// NoRetry: the client knows another call would get the same answer,
	// whatever the outcome's table says (an answer that named no label
	// although the server was made to choose one).
	NoRetry bool
	// Limits is what the answer's rate-limit headers said, if any.
	Limits Limits
	// Err is the underlying cause, kept for errors.Is/As; never printed raw.
	Err error
}

func (e *Error) Error() string { return string(e.Outcome) + ": " + e.Summary() }

// Short is the status and what it means, without anything the server
// said: "HTTP 402: payment required".
func (e *Error) Short() string {
	if e.Status != 0 {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Msg)
	}
	return e.Msg
}

// Summary is the one-line message written to the results' error column and
// the logs: the status, what it means, the server's own reason (quoted,
// summarised) and its request id, e.g.
// `HTTP 402: payment required: "You have depleted your monthly included
// credits." (request id Root=1-67dd...)`. It never holds a body or a token.
func (e *Error) Summary() string {
	var b strings.Builder
	b.WriteString(e.Short())
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %q", e.Reason)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request id %s)", e.RequestID)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Clone returns a copy of e.
func (e *Error) Clone() *Error {
	c := *e
	return &c
}

// Cause is a short name for what went wrong, for logs that count failures:
// "HTTP 503", "no answer within 12s", "cannot connect to host: connection refused".
func (e *Error) Cause() string {
	if e.Status != 0 {
		return fmt.Sprintf("HTTP %d", e.Status)
	}
	return e.Msg
}

// StopsRun reports whether the error means no other row can succeed
// either: the token was rejected, the account cannot pay, the model does
// not exist there, the endpoint refuses every call, the provider cannot be
// reached at all, or it has been down since the start.
func (e *Error) StopsRun() bool {
	return e.Unreachable || e.Down || e.Outcome.StopsRun()
}

// Retryable reports whether another attempt may succeed, as the outcome
// table says: timeouts (408 included) and 429 always; upstream_failed when
// it is a connection error, 500/502/503/504, the CDN's 520-524 or TEI's 424
// (its backend failed). Other 4xx, auth and payload errors are permanent,
// and so is an error the client marked NoRetry.
func (e *Error) Retryable() bool {
	if e.NoRetry {
		return false
	}
	switch e.Outcome.Retry() {
	case outcome.RetryAlways, outcome.RetryOnce:
		return true
	case outcome.RetryTransient:
		switch e.Status {
		case 0, 424, 500, 502, 503, 504, 520, 521, 522, 523, 524:
			return true
		}
	}
	return false
}

// AsError returns err as a *Error when it is one. A nil error, or a
// *Error itself, is answered without errors.As (whose target escapes):
// every layer asks this of every call's result.
func AsError(err error) (*Error, bool) {
	switch e := err.(type) {
	case nil:
		return nil, false
	case *Error:
		return e, true
	}
	var pe *Error
	if errors.As(err, &pe) {
		return pe, true
	}
	return nil, false
}

// OutcomeOf maps any error from a Classifier to an outcome code; errors that
// are not provider errors (a cancelled context) map to not_attempted.
func OutcomeOf(err error) outcome.Code {
	if err == nil {
		return outcome.Success
	}
	if pe, ok := AsError(err); ok {
		return pe.Outcome
	}
	return outcome.NotAttempted
}
