package resilience

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// RefusedAfter is how many calls, the first of a run, must all get the
// same 4xx (one that is not 401/402/403/404/429) before a harmless sample
// text is sent to tell whether the endpoint refuses every call or those
// texts were bad. A batch refused counts as one call, as a single text
// does: it is held until the verdict rather than split, since splitting a
// batch of b texts down to its bad one costs up to 2b-2 more calls and the
// sample costs one.
const RefusedAfter = 3

// Verdict says whether the endpoint serves at all, judged from the first
// answers of a run: a success proves it does; RefusedAfter calls that all
// got the same 4xx, followed by a sample text (provider.SampleText) that
// gets it too, prove it refuses every call (an old URL, a redirect turned
// into a GET, a model for another task). Until then the row (or the batch)
// that got such a 4xx cannot tell whether its text or the endpoint is at
// fault: a batch run holds it until the verdict (Done), so that a fault of
// the endpoint is not recorded as the text's, final for --resume, and a
// batch is not split into calls the endpoint will refuse too.
type Verdict struct {
	mu      sync.Mutex
	state   verdictState
	status  int // of the streak of refusals
	streak  int
	probing bool
	done    chan struct{}
	refusal *provider.Error // the answer that proved it, for its message
	refused func(*provider.Error)
}

// OnRefused sets f to be called, once, the moment the endpoint is found to
// refuse every call, with the judged refusal; a batch stops its admission
// there, before the row that learnt it gives back its slot. Set it before
// the first call.
func (v *Verdict) OnRefused(f func(*provider.Error)) {
	v.mu.Lock()
	v.refused = f
	v.mu.Unlock()
}

type verdictState uint8

const (
	undecided verdictState = iota
	serves
	refuses
)

func newVerdict() *Verdict { return &Verdict{done: make(chan struct{})} }

// Done is closed once the verdict is known.
func (v *Verdict) Done() <-chan struct{} { return v.done }

// Probing reports whether the sample is on its way: the verdict comes with
// its answer, and a batch run sends nothing new meanwhile.
func (v *Verdict) Probing() bool {
	v.mu.Lock()
	probing := v.probing
	v.mu.Unlock()
	if !probing {
		return false
	}
	// Until done is closed, not until the state is set: a batch stops its
	// admission in between (OnRefused), and must not admit rows meanwhile.
	select {
	case <-v.done:
		return false
	default:
		return true
	}
}

// Refuses reports whether the endpoint was found to refuse every call.
func (v *Verdict) Refuses() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state == refuses
}

// Refusal is the answer that proved the endpoint refuses every call, as
// judged (upstream_endpoint); nil while it is not proved.
func (v *Verdict) Refusal() *provider.Error {
	v.mu.Lock()
	r := v.refusal
	v.mu.Unlock()
	if r == nil {
		return nil
	}
	pe, _ := provider.AsError(v.Judge(r))
	return pe
}

// Pending reports whether err is an answer whose blame is not known yet: a
// 4xx that may be the text's or the endpoint's, before the verdict.
func (v *Verdict) Pending(err error) bool {
	pe, ok := provider.AsError(err)
	if !ok || pe.Outcome != outcome.UpstreamRequestRejected {
		return false
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.state == undecided
}

// Judge returns err as the endpoint's refusal (upstream_endpoint, which
// stops a batch run and is not final for --resume) when the endpoint was
// found to refuse every call with that status, else err as it is.
func (v *Verdict) Judge(err error) error {
	pe, ok := provider.AsError(err)
	if !ok || pe.Outcome != outcome.UpstreamRequestRejected {
		return err
	}
	v.mu.Lock()
	refusal, state, status := v.refusal, v.state, v.status
	v.mu.Unlock()
	if state != refuses || pe.Status != status {
		return err
	}
	c := pe.Clone()
	c.Outcome = outcome.UpstreamEndpoint
	c.Msg = fmt.Sprintf("the endpoint refuses every call: the run's first %d calls and a harmless sample all got HTTP %d", RefusedAfter, refusal.Status)
	return c
}

func (v *Verdict) decide(s verdictState, refusal *provider.Error) {
	v.mu.Lock()
	if v.state != undecided {
		v.mu.Unlock()
		return
	}
	v.state, v.refusal = s, refusal
	f := v.refused
	v.mu.Unlock()
	// A batch stops its admission before anything waiting for the verdict
	// (its admission, the rows held) goes on: closed first, done would let
	// the admission send rows into the endpoint for as long as the stop
	// takes to be told.
	if f != nil && s == refuses {
		f(v.Refusal())
	}
	close(v.done)
}

// observe learns from one answer to a call of texts (one, or a batch: a
// batch refused may hold one bad text, but the sample, not the streak, is
// the proof). When it completes a streak of refusals it sends the sample
// through probe and returns err as judged.
func (v *Verdict) observe(ctx context.Context, texts []string, err error, probe func(context.Context, []string) (provider.Answer, error)) error {
	if err == nil {
		v.decide(serves, nil)
		return nil
	}
	pe, ok := provider.AsError(err)
	if !ok || pe.Outcome != outcome.UpstreamRequestRejected || probe == nil {
		// 5xx, 429, timeouts: no evidence either way.
		return v.Judge(err)
	}
	v.mu.Lock()
	if v.state != undecided || v.probing {
		v.mu.Unlock()
		return v.Judge(err)
	}
	switch {
	case v.streak == 0 || pe.Status == v.status:
		v.status = pe.Status
		v.streak++
	default:
		// Different refusals: the texts, not the endpoint.
		v.mu.Unlock()
		v.decide(serves, nil)
		return err
	}
	if v.streak < RefusedAfter || texts[0] == provider.SampleText {
		v.mu.Unlock()
		return err
	}
	v.probing = true
	v.mu.Unlock()

	// The sample is a call of its own: the row's trace counts it (a call
	// the provider got), the breaker and the limits do not see it.
	_, perr := probe(ctx, []string{provider.SampleText})
	ppe, _ := provider.AsError(perr)
	switch {
	case perr == nil:
		v.decide(serves, nil)
	case ppe != nil && ppe.Outcome == outcome.UpstreamRequestRejected && ppe.Status == pe.Status:
		v.decide(refuses, pe)
	default:
		// The sample met something else (a 5xx, a timeout): no proof that
		// the endpoint refuses every call, so it is not stopped for it.
		v.decide(serves, nil)
	}
	return v.Judge(err)
}

// runState is what the layers know about the run as a whole.
type runState struct {
	succeeded atomic.Bool  // some call of the run got a usable answer
	first     atomic.Int64 // unix nanos of the run's first call, 0 before
	down      atomic.Pointer[string]
	verdict   *Verdict

	mu     sync.Mutex
	onDown func(cause string)
	onStop func(*provider.Error)
}

// stopSeen tells onStop of an answer that stops the run, if it does.
func (s *runState) stopSeen(err error) {
	pe, ok := provider.AsError(err)
	if !ok || !pe.StopsRun() {
		return
	}
	s.mu.Lock()
	f := s.onStop
	s.mu.Unlock()
	if f != nil {
		f(pe)
	}
}

// markDown records, with the most common cause, that the breaker's probes
// failed while nothing has succeeded since the run's first call, at least
// window ago (--breaker-window): the provider is down, not having a bad
// day. The first time, it tells onDown (a batch stops there).
func (s *runState) markDown(cause string, window time.Duration) {
	first := s.first.Load()
	if s.succeeded.Load() || first == 0 || time.Since(time.Unix(0, first)) < window {
		return
	}
	if s.down.CompareAndSwap(nil, &cause) {
		s.mu.Lock()
		f := s.onDown
		s.mu.Unlock()
		if f != nil {
			f(cause)
		}
	}
}

// DownCause is the most common failure of a provider found down (""
// while it is not).
func (s *runState) DownCause() string {
	if c := s.down.Load(); c != nil {
		return *c
	}
	return ""
}
