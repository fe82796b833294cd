package serve

import (
	"net/http"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// TestCacheHitTakesNoSlot: a request whose text's request was answered
// before is answered from the response cache at once, while the only
// slot is held by a slow call: no slot, no call, nothing of the budget
// (without the cache it would be 503 local_capacity after the admission
// wait). /metrics counts the hit.
func TestCacheHitTakesNoSlot(t *testing.T) {
	f := &fakehf.Fake{Latency: 400 * time.Millisecond}
	h := start(t, f, func(s *setup) {
		s.res.Concurrency = 1
		s.cfg.Pipeline.Dedupe = false
		s.cacheDir = t.TempDir()
	})
	if a := h.feedback("a", "a lovely repair"); a.status != http.StatusOK {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	// The entry is written by the cache's writer: give it its moment.
	time.Sleep(100 * time.Millisecond)
	calls := f.Calls()
	slow := make(chan answer, 1)
	go func() { slow <- h.feedback("b", "another text, sent") }()
	time.Sleep(100 * time.Millisecond) // b holds the only slot
	began := time.Now()
	a := h.feedback("c", "a lovely repair")
	took := time.Since(began)
	if a.status != http.StatusOK || a.json(t)["label"] != "POSITIVE" || took > 200*time.Millisecond {
		t.Fatalf("the cached text: %d in %s: %s", a.status, took, a.body)
	}
	if b := <-slow; b.status != http.StatusOK {
		t.Fatalf("the slow one: %d %s", b.status, b.body)
	}
	if got := f.Calls() - calls; got != 1 {
		t.Fatalf("%d calls for one new text and one cached", got)
	}
	if v := h.value(h.metrics(), "hfsent_cache_hits_total"); v != 1 {
		t.Errorf("hfsent_cache_hits_total %g", v)
	}
}
