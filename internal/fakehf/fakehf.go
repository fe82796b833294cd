// Package fakehf is a fake of the Hugging Face text-classification API for
// tests and benchmarks: it answers exactly like the real one (a nested
// [[{label,score}]] list, JSON error objects, Retry-After, the loading 503)
// and records what it was sent, on a real loopback HTTP server.
package fakehf

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Reply is one scripted answer. A zero Status means 200 with a normal
// classification of the inputs.
type Reply struct {
	Status int
	Header map[string]string
	Body   string        // raw body; empty means the default for Status
	NoBody bool          // answer with no body at all
	Delay  time.Duration // extra delay before answering (beyond Latency)
	// Immediate answers without Latency: a rejection at the door, as a
	// provider's rate limiter sends its 429s.
	Immediate bool
}

// Fake is the fake provider. Set its fields before the first request.
type Fake struct {
	// Latency is how long every call takes; the wait ends early if the
	// client goes away.
	Latency time.Duration
	// Flat answers [{label,score}] instead of the nested form.
	Flat bool
	// Token, when set, is the only bearer token accepted (401 otherwise).
	Token string
	// Script, when set, chooses the reply for call n (from 1), given the
	// texts of the call. It may be called concurrently.
	Script func(n int64, texts []string, r *http.Request) Reply
	// NoRecord stops it keeping the texts and headers it was sent, so that
	// a benchmark of a million calls measures the client, not the fake.
	NoRecord bool

	calls       atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64

	mu      sync.Mutex
	seen    map[string]int
	headers []http.Header
	bodies  [][]byte
	auths   []string
}

// Start runs f on a loopback server; Close it when done.
func Start(f *Fake) *httptest.Server {
	return httptest.NewServer(Handler(f))
}

// Handler prepares f to serve and returns it.
func Handler(f *Fake) http.Handler {
	f.seen = map[string]int{}
	return f
}

// Calls is the number of requests received.
func (f *Fake) Calls() int64 { return f.calls.Load() }

// InFlight is the number of requests being handled now, this one included
// when called from Script. It drops when a handler returns, before the client
// reads the answer, so a capacity check on it never counts a finished call.
func (f *Fake) InFlight() int64 { return f.inFlight.Load() }

// MaxInFlight is the most requests it held at once.
func (f *Fake) MaxInFlight() int64 { return f.maxInFlight.Load() }

// Seen is how many times each text was sent.
func (f *Fake) Seen() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.seen))
	for k, v := range f.seen {
		out[k] = v
	}
	return out
}

// Headers returns the request headers received, in arrival order.
func (f *Fake) Headers() []http.Header {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]http.Header(nil), f.headers...)
}

// Bodies returns the request bodies received, in arrival order.
func (f *Fake) Bodies() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.bodies...)
}

type request struct {
	Inputs json.RawMessage `json:"inputs"`
}

type bodyKey struct{}

// Body is the body of the request a Script is answering.
func Body(r *http.Request) []byte {
	b, _ := r.Context().Value(bodyKey{}).([]byte)
	return b
}

// Label is the fake model's deterministic answer for a text.
func Label(text string) (string, float64) {
	l := strings.ToLower(text)
	for _, w := range []string{"bad", "terrible", "disappoint", "broke", "never", "damaged"} {
		if strings.Contains(l, w) {
			return "NEGATIVE", 0.9731
		}
	}
	return "POSITIVE", 0.9987
}

func (f *Fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := f.calls.Add(1)
	cur := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for m := f.maxInFlight.Load(); cur > m && !f.maxInFlight.CompareAndSwap(m, cur); m = f.maxInFlight.Load() {
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	var req request
	var texts []string
	if json.Unmarshal(body, &req) == nil {
		var one string
		if json.Unmarshal(req.Inputs, &one) == nil {
			texts = []string{one}
		} else {
			_ = json.Unmarshal(req.Inputs, &texts)
		}
	}
	if !f.NoRecord {
		f.mu.Lock()
		for _, t := range texts {
			f.seen[t]++
		}
		f.headers = append(f.headers, r.Header.Clone())
		f.bodies = append(f.bodies, body)
		f.mu.Unlock()
	}

	var rep Reply
	if f.Token != "" && r.Header.Get("Authorization") != "Bearer "+f.Token {
		rep = Reply{Status: 401, Body: `{"error":"Invalid credentials in Authorization header"}`}
	} else if f.Script != nil {
		rep = f.Script(n, texts, r.WithContext(context.WithValue(r.Context(), bodyKey{}, body)))
	}
	wait := f.Latency + rep.Delay
	if rep.Immediate {
		wait = rep.Delay
	}
	if !sleep(r, wait) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	if rep.Status == 0 {
		rep.Status = 200
	}
	if rep.Body == "" && !rep.NoBody {
		rep.Body = defaultBody(rep.Status, texts, f.Flat)
	}
	w.WriteHeader(rep.Status)
	_, _ = io.WriteString(w, rep.Body)
}

func sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

type labelScore struct {
	Label string  `json:"label"`
	Score float64 `json:"score"`
}

func defaultBody(status int, texts []string, flat bool) string {
	switch {
	case status == 200:
		var v any
		if flat {
			out := make([]labelScore, len(texts))
			for i, t := range texts {
				l, s := Label(t)
				out[i] = labelScore{l, s}
			}
			v = out
		} else {
			out := make([][]labelScore, len(texts))
			for i, t := range texts {
				l, s := Label(t)
				out[i] = []labelScore{{l, s}}
			}
			v = out
		}
		b, _ := json.Marshal(v)
		return string(b)
	case status == 429:
		return `{"error":"Rate limit reached. You reached free usage limit (reset hourly)."}`
	case status == 401 || status == 403:
		return `{"error":"Invalid credentials in Authorization header"}`
	case status >= 500:
		return `{"error":"Internal Server Error"}`
	}
	return `{"error":"Bad request"}`
}
