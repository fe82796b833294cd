package queue

import (
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hfsent/hfsent/internal/resilience"
)

// unreachable reports whether a database error is the database out of
// reach (the connection, the server going away or not taking connections),
// rather than a statement turned down (a deadlock, a serialisation
// failure, resources).
func unreachable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "08") || pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03"
	}
	return true
}

// retryable reports whether a database error may pass: the connection or
// the server going away, a deadlock or serialisation failure, resources.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case len(pe.Code) >= 2 && (pe.Code[:2] == "08" || pe.Code[:2] == "53" || pe.Code[:2] == "57" || pe.Code[:2] == "58"):
			return true
		case pe.Code == "40001" || pe.Code == "40P01" || pe.Code == "55P03":
			return true
		}
		return false
	}
	// Anything else (a network error, a closed connection, a timeout, an
	// EOF) is the connection, not the statement.
	return true
}

// backoff is how long to wait before trying the database again: 100ms,
// 200ms ... capped at 5s, with jitter (half to all of it), the rule the
// provider's retries follow.
func backoff(n int) time.Duration { return resilience.Backoff(n, 100*time.Millisecond, 5*time.Second) }

// rowBackoff is how long a failed row waits before its next claim: 1s, 2s,
// 4s ... capped at 60s, with jitter (half to all of it).
func rowBackoff(attempt int) time.Duration {
	return resilience.Backoff(attempt, time.Second, time.Minute)
}

func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}
