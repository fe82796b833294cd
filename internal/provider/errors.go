package provider

import (
	"errors"
	"fmt"
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
	// Msg is a short, safe summary.
	Msg string
	// Err is the underlying cause, kept for errors.Is/As; never printed raw.
	Err error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("%s: HTTP %d: %s", e.Outcome, e.Status, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Outcome, e.Msg)
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
// not exist there, or the provider cannot be reached at all.
func (e *Error) StopsRun() bool { return e.Unreachable || e.Outcome.StopsRun() }

// Retryable reports whether another attempt may succeed: connection errors,
// timeouts, 429 and 500/502/503/504. Other 4xx, auth and payload errors are
// permanent.
func (e *Error) Retryable() bool {
	switch e.Outcome {
	case outcome.UpstreamTimeout, outcome.UpstreamRateLimited:
		return true
	case outcome.UpstreamFailed:
		switch e.Status {
		case 0, 500, 502, 503, 504:
			return true
		}
	}
	return false
}

// AsError returns err as a *Error when it is one.
func AsError(err error) (*Error, bool) {
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
