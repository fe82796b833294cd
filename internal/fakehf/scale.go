package fakehf

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ScaledToZero emulates the proxy in front of a dedicated Inference
// Endpoint scaled to zero, as the Inference Endpoints autoscaling guide
// describes it: the first request starts a replica, which is up StartUp
// later; until then the proxy answers 503, unless the request carries
// X-Scale-Up-Timeout: SECONDS, in which case it holds the request until the
// replica is up (503 if that is later than SECONDS). Once up, Inner answers.
// The guide does not show the 503's body; this one is a short text.
type ScaledToZero struct {
	Inner   http.Handler
	StartUp time.Duration

	mu      sync.Mutex
	readyAt time.Time

	calls, refused, held atomic.Int64
}

// Calls, Refused and Held count the requests received, those answered 503,
// and those held until the replica was up.
func (s *ScaledToZero) Calls() int64   { return s.calls.Load() }
func (s *ScaledToZero) Refused() int64 { return s.refused.Load() }
func (s *ScaledToZero) Held() int64    { return s.held.Load() }

func (s *ScaledToZero) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	s.mu.Lock()
	if s.readyAt.IsZero() {
		s.readyAt = time.Now().Add(s.StartUp)
	}
	wait := time.Until(s.readyAt)
	s.mu.Unlock()
	if wait > 0 {
		secs, _ := strconv.Atoi(r.Header.Get("X-Scale-Up-Timeout"))
		hold := time.Duration(secs) * time.Second
		if hold < wait {
			if hold > 0 && !sleep(r, hold) {
				return
			}
			s.refused.Add(1)
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "Service Unavailable")
			return
		}
		s.held.Add(1)
		if !sleep(r, wait) {
			return
		}
	}
	s.Inner.ServeHTTP(w, r)
}
