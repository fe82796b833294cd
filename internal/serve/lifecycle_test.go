package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// panicky panics inside the policies (so while its call holds a slot) for
// a text that asks for it.
type panicky struct{ provider.Classifier }

func (p panicky) Classify(ctx context.Context, call provider.Call) (provider.Answer, error) {
	for _, t := range call.Texts {
		if strings.Contains(t, "#boom") {
			panic("boom")
		}
	}
	return p.Classifier.Classify(ctx, call)
}

// TestSlotsReleasedOnEveryPath: after 100 requests that time out, 100 whose
// callers disconnect during their call, a panic in a handler and one in the
// classifier, every -c slot is free again: a following burst of -c requests
// is all admitted.
func TestSlotsReleasedOnEveryPath(t *testing.T) {
	if testing.Short() {
		t.Skip("sends a few hundred requests")
	}
	const c = 8
	burst := newGate()
	var arrivedMu sync.Mutex
	arrived := map[string]chan struct{}{} // a hanging text's call reached the provider
	var cancelledLate atomic.Int64        // calls that outlived their caller by more than 2s
	var held []time.Duration              // how long the provider held each hanging call
	f := &fakehf.Fake{}
	f.Script = func(_ int64, texts []string, r *http.Request) fakehf.Reply {
		switch t := texts[0]; {
		case strings.Contains(t, "#timeout"):
			<-r.Context().Done() // never answered: the attempt times out
		case strings.Contains(t, "#hang"):
			arrivedMu.Lock()
			ch := arrived[t]
			arrivedMu.Unlock()
			close(ch)
			arrival := time.Now()
			select {
			case <-r.Context().Done(): // the caller left: hfsent cancelled the call
				arrivedMu.Lock()
				held = append(held, time.Since(arrival))
				arrivedMu.Unlock()
			case <-time.After(2 * time.Second):
				cancelledLate.Add(1)
			}
		case strings.Contains(t, "#burst"):
			burst.wait(r)
		}
		return fakehf.Reply{}
	}
	h := start(t, f, func(s *setup) {
		s.res.Concurrency = c
		s.res.Retries = 0
		s.res.Timeout = 250 * time.Millisecond
		s.res.BreakerMinCalls = 100_000                // timeouts are not an outage here
		s.cfg.Pipeline.AdmissionWait = 3 * time.Second // the queue itself never refuses here
		s.cfg.Pipeline.ShedStandingQueue = false       // a queue is wanted here
		s.cfg.RequestTimeout = 10 * time.Second
		s.wrap = func(cls provider.Classifier) provider.Classifier { return panicky{cls} }
	})
	h.s.afterSubmit = func(r *http.Request) {
		if r.Header.Get("X-Test-Panic") != "" {
			panic("a bug in a handler")
		}
	}

	// 100 requests whose attempts time out, 16 callers at a time.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	var timeouts atomic.Int64
	for i := range 100 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if a := h.feedback(fmt.Sprint("t", i), fmt.Sprint("#timeout ", i)); a.status == 504 && a.code(t) == string(outcome.UpstreamTimeout) {
				timeouts.Add(1)
			}
		})
	}
	wg.Wait()
	if timeouts.Load() != 100 {
		t.Fatalf("%d of 100 requests timed out 504", timeouts.Load())
	}

	// 100 callers that disconnect while their call is in flight, c at a time.
	sem = make(chan struct{}, c)
	var missed atomic.Int64
	for i := range 100 {
		sem <- struct{}{}
		text := fmt.Sprint("#hang ", i)
		ch := make(chan struct{})
		arrivedMu.Lock()
		arrived[text] = ch
		arrivedMu.Unlock()
		wg.Go(func() {
			defer func() { <-sem }()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan answer, 1)
			go func() {
				done <- h.do(ctx, http.MethodPost, PathFeedback, "application/json",
					[]byte(fmt.Sprintf(`{"request_id": "h%d", "text": %q}`, i, text)))
			}()
			select {
			case <-ch:
				cancel()
				if a := <-done; a.err == nil {
					t.Errorf("%s: answered %d after its caller left", text, a.status)
				}
			case a := <-done:
				cancel()
				select {
				case <-ch:
					// It reached the provider and timed out before this
					// caller could leave (a slow machine): no disconnect.
					missed.Add(1)
				default:
					t.Errorf("%s: answered %d %s before its call reached the provider", text, a.status, a.body)
				}
			}
		})
	}
	wg.Wait()
	if missed.Load() > 10 {
		t.Fatalf("%d of 100 calls timed out before their callers could leave", missed.Load())
	}

	// A panic in a handler while its call is out, and one in the
	// classifier.
	req, _ := http.NewRequest(http.MethodPost, h.url+PathFeedback, strings.NewReader(`{"request_id": "p1", "text": "a panic in the handler"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Test-Panic", "1")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 500 {
		t.Fatalf("a handler panic answered %d, want 500", resp.StatusCode)
	}
	if a := h.feedback("p2", "#boom"); a.status != 502 || a.code(t) != string(outcome.UpstreamFailed) {
		t.Fatalf("a classifier panic answered %d %s", a.status, a.body)
	}

	waitFor(t, "every slot free", func() bool {
		return h.value(h.metrics(), "hfsent_slots_in_use") == 0 && f.InFlight() == 0
	})
	if n := cancelledLate.Load(); n > 0 {
		t.Fatalf("%d provider calls went on for 2s after their caller left", n)
	}
	// The caller leaves as soon as its call arrives: the call must end
	// then, not at its 250ms attempt timeout.
	arrivedMu.Lock()
	slices.Sort(held)
	median := held[len(held)/2]
	arrivedMu.Unlock()
	if median > 100*time.Millisecond {
		t.Fatalf("a call whose caller left was held %s (median): it was not cancelled with its caller", median)
	}

	// A burst of -c requests: all admitted, the provider holding them all.
	answers := make(chan answer, c)
	for i := range c {
		go func() { answers <- h.feedback(fmt.Sprint("burst", i), fmt.Sprint("#burst ", i)) }()
	}
	waitFor(t, "the burst to reach the provider", func() bool { return f.InFlight() == c })
	burst.open()
	for range c {
		if a := <-answers; a.status != 200 {
			t.Fatalf("burst after the failures: %d %s", a.status, a.body)
		}
	}
	if m := h.metrics(); h.value(m, "hfsent_http_requests_total", "code", "500") != 1 {
		t.Fatalf("the handler panic is not counted as a 500")
	}
	if !strings.Contains(h.logs.String(), "a bug in a handler") || !strings.Contains(h.logs.String(), "boom") {
		t.Fatalf("the panics are not logged")
	}
}

// TestGracefulShutdown: at the stop (SIGTERM), /readyz turns 503, new
// connections are refused, and the requests in flight get their answers;
// Run returns nil.
func TestGracefulShutdown(t *testing.T) {
	g := newGate()
	f := &fakehf.Fake{Script: func(_ int64, _ []string, r *http.Request) fakehf.Reply { g.wait(r); return fakehf.Reply{} }}
	h := start(t, f, func(s *setup) { s.cfg.Grace = 20 * time.Second })
	answers := make(chan answer, 3)
	for i := range 3 {
		go func() { answers <- h.feedback(fmt.Sprint("g", i), uniq(i)) }()
	}
	waitFor(t, "three calls in flight", func() bool { return f.InFlight() == 3 })
	if ok, _, _ := h.s.Ready(); !ok {
		t.Fatal("not ready before the stop")
	}
	stopped := make(chan error, 1)
	go func() { stopped <- h.shutdown() }()
	waitFor(t, "/readyz to turn 503", func() bool { ok, reason, _ := h.s.Ready(); return !ok && reason == "draining" })
	waitFor(t, "new connections to be refused", func() bool {
		conn, err := net.DialTimeout("tcp", h.addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	select {
	case err := <-stopped:
		t.Fatalf("Run returned (%v) with requests in flight", err)
	default:
	}
	g.open()
	for range 3 {
		if a := <-answers; a.status != 200 {
			t.Fatalf("a request in flight at the stop got %d %s (%v)", a.status, a.body, a.err)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestGraceOver: requests still in flight when --grace is over are
// cancelled and answered 503 not_attempted, and the server stops.
func TestGraceOver(t *testing.T) {
	f := &fakehf.Fake{Script: func(_ int64, _ []string, r *http.Request) fakehf.Reply {
		<-r.Context().Done()
		return fakehf.Reply{}
	}}
	h := start(t, f, func(s *setup) { s.cfg.Grace = 300 * time.Millisecond })
	answers := make(chan answer, 2)
	for i := range 2 {
		go func() { answers <- h.feedback(fmt.Sprint("g", i), uniq(i)) }()
	}
	waitFor(t, "two calls in flight", func() bool { return f.InFlight() == 2 })
	begin := time.Now()
	if err := h.shutdown(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Fatalf("stopping took %s with a 300ms grace", took)
	}
	for range 2 {
		a := <-answers
		if a.err != nil && !errors.Is(a.err, context.Canceled) {
			// The connection may close before the answer is read; a
			// written answer must be the right one.
			continue
		}
		if a.status != 503 || a.code(t) != string(outcome.NotAttempted) || retryAfter(a) < 1 {
			t.Fatalf("after the grace: %d %s", a.status, a.body)
		}
	}
}
