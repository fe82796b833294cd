package resilience

import (
	"container/list"
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// Slots bounds the calls in flight: at most -c, and with --adaptive at most
// the AIMD limit below it. A slot is held for one attempt only, from just
// before it is sent to its answer: a row waiting for its next attempt
// (backoff, a Retry-After, an open breaker) holds none, so rows in retry
// never crowd out calls.
//
// Waiters are served first come, first served, each woken alone (no
// thundering herd), like golang.org/x/sync/semaphore, which cannot be used
// because the adaptive limit changes the size.
type Slots struct {
	mu      sync.Mutex
	max     float64
	inUse   int
	waiters list.List // of *slotWaiter, oldest first
	c       *Counters
	// pausedUntil (unix nanos, 0: never) holds every grant back: the
	// provider asked for a pause (a 429's Retry-After). Waiting for it in
	// this queue, rather than each row sleeping on its own, keeps the rows
	// in order and admits no new row meanwhile.
	pausedUntil int64
	pauseTimer  *time.Timer

	adaptive bool
	aimd     aimd

	// A bound set from outside the process (a fleet's budget: SetShare).
	// share is -1 when there is none; otherwise no slot is granted past
	// share, nor once the lease passed: leaseEnd, in nanoseconds of this
	// process's monotonic clock since base, so that a wall-clock step (or a
	// process stopped and continued) cannot stretch it. renewed is closed
	// and replaced at each SetShare, for a call that waits for the lease
	// just before it is sent (waitLease). peak is the most slots held plus
	// rows waiting since the last TakeDemand.
	share    int
	base     time.Time
	leaseEnd atomic.Int64
	renewed  chan struct{}
	peak     int
	// lapse is why the lease could not be renewed, as its holder said
	// last (SetLapse); "" until it said.
	lapse string
	// safe is the bound once the lease passed, until safeEnd (same clock
	// as leaseEnd): the budget's safe share (SetSafe), 0 for none. A call
	// is sent on it only while every slot held, its own included, is
	// within it (waitLease): a slot granted under the share, above it,
	// waits. safeTimer wakes the waiters when the lease passes onto it.
	safe      int
	safeEnd   atomic.Int64
	safeTimer *time.Timer
}

type slotWaiter struct {
	ready       chan *Permit // buffered: the grant never blocks the releaser
	ignorePause bool
}

// Permit is one slot, held for one call.
type Permit struct {
	s        *Slots
	released bool // guarded by s.mu
	// What the adaptive limit needs to judge the call's answer.
	epoch uint64
	full  bool // the call took the last free place: the limit was binding
	k     int  // calls in flight when it was sent, itself included
	lim   int  // the limit when it was sent
	probe bool // k reached the level refused last time
	// again is set when the call timed out for a row that had timed out
	// before: one slow text is not overload, so it is no evidence.
	again bool
	// probes is the number of edge tests granted before this call: one
	// granted while it was out overlapped it.
	probes uint64
}

// NewSlots returns n slots; with adaptive, an AIMD limit between 1 and n
// decides how many of them may be used.
func NewSlots(n int, adaptive bool, c *Counters) *Slots {
	if n < 1 {
		n = 1
	}
	if c == nil {
		c = &Counters{}
	}
	s := &Slots{max: float64(n), c: c, adaptive: adaptive, share: -1, base: time.Now(), renewed: make(chan struct{})}
	s.aimd.init(float64(n), adaptive)
	if adaptive {
		c.limit.Store(int64(s.limit()))
	}
	return s
}

// limit is the number of slots usable now.
func (s *Slots) limit() int {
	if !s.adaptive {
		return int(s.max)
	}
	return int(s.aimd.limit)
}

// Limit is the number of calls allowed in flight now.
func (s *Slots) Limit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit()
}

// InUse is the number of slots held now.
func (s *Slots) InUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inUse
}

// Max is -c: the most slots there can ever be.
func (s *Slots) Max() int { return int(s.max) }

// errStopped is returned when sending stopped (an interrupt, --max-duration)
// while a row waited for its turn: the call was never sent.
var errStopped = errors.New("not sent: sending stopped")

// IsStopped reports whether err says a call was not sent because sending
// stopped.
func IsStopped(err error) bool { return errors.Is(err, errStopped) }

// grantable reports whether one more call may start. Once the adaptive
// limit climbs back to the level where calls were refused, one call at a
// time tests it: refusals come back a round trip late, and every call sent
// at that level meanwhile would be refused too. Requires s.mu.
func (s *Slots) grantable(ignorePause bool) bool {
	if s.inUse >= s.limit() {
		return false
	}
	if n, ok, _ := s.bound(); s.share >= 0 && (!ok || s.inUse >= n) {
		return false
	}
	if !ignorePause && s.pausedUntil != 0 && time.Now().UnixNano() < s.pausedUntil {
		return false
	}
	return !s.adaptive || !s.aimd.blocksProbe(s.inUse)
}

// Pause holds every grant back for d (calls in flight go on); it reports
// whether this started a pause rather than extended one.
func (s *Slots) Pause(d time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now().UnixNano()
	until := now + int64(d)
	if until <= s.pausedUntil {
		return false
	}
	started := s.pausedUntil < now
	s.pausedUntil = until
	if s.pauseTimer != nil {
		s.pauseTimer.Stop()
	}
	s.pauseTimer = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.wakeLocked()
	})
	return started
}

// Paused is how long grants are still held back (0: not paused).
func (s *Slots) Paused() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pausedUntil == 0 {
		return 0
	}
	return max(0, time.Duration(s.pausedUntil-time.Now().UnixNano()))
}

// grant hands out one slot. Requires s.mu.
func (s *Slots) grant() *Permit {
	s.inUse++
	s.notePeak()
	p := &Permit{s: s, k: s.inUse, lim: s.limit(), full: s.inUse >= s.limit()}
	if s.adaptive {
		p.epoch, p.probe, p.probes = s.aimd.onGrant(s.inUse)
	}
	return p
}

// Acquire waits for a slot until ctx ends or stop is closed (no more calls
// may be sent; nil: never). Waiters are served in arrival order.
func (s *Slots) Acquire(ctx context.Context, stop <-chan struct{}) (*Permit, error) {
	return s.acquire(ctx, stop, false)
}

// acquire is Acquire; ignorePause is for the fallback model, which a
// pause the primary provider asked for does not concern.
func (s *Slots) acquire(ctx context.Context, stop <-chan struct{}, ignorePause bool) (*Permit, error) {
	s.mu.Lock()
	if s.waiters.Len() == 0 && s.grantable(ignorePause) {
		p := s.grant()
		s.mu.Unlock()
		return p, nil
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	w := &slotWaiter{ready: make(chan *Permit, 1), ignorePause: ignorePause}
	el := s.waiters.PushBack(w)
	s.notePeak()
	s.mu.Unlock()

	var err error
	select {
	case p := <-w.ready:
		return p, nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = errStopped
	}
	s.mu.Lock()
	select {
	case p := <-w.ready:
		// Granted while giving up: hand it on.
		s.mu.Unlock()
		p.Cancel()
		return nil, err
	default:
	}
	s.waiters.Remove(el)
	// Leaving the head of the queue may let the next one in.
	s.wakeLocked()
	s.mu.Unlock()
	return nil, err
}

// wakeLocked grants slots to waiters, oldest first, while calls may start.
func (s *Slots) wakeLocked() {
	for s.waiters.Len() > 0 {
		w := s.waiters.Front().Value.(*slotWaiter)
		if !s.grantable(w.ignorePause) {
			return
		}
		s.waiters.Remove(s.waiters.Front())
		w.ready <- s.grant()
	}
}

// Release gives the slot back after its call; err is the call's result,
// which moves the adaptive limit. Releasing twice is harmless.
func (p *Permit) Release(err error) { p.giveBack(true, err) }

// Cancel gives the slot back unused: no call was sent with it.
func (p *Permit) Cancel() { p.giveBack(false, nil) }

func (p *Permit) giveBack(sent bool, err error) {
	if p == nil {
		return
	}
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.released {
		return
	}
	p.released = true
	s.inUse--
	switch {
	case s.adaptive && sent:
		s.aimd.onResult(p, err, s.inUse)
		s.c.limit.Store(int64(s.limit()))
	case s.adaptive && p.probe:
		s.aimd.probing = false // the test of the edge was never sent
	}
	if _, _, onSafe := s.bound(); onSafe {
		s.changedLocked() // a call waiting to be within the safe share may go
		return
	}
	s.wakeLocked()
}

// outageStarted and outageEnded are called by the breaker: the limit cut
// during an outage says nothing about the provider's capacity once it is
// back, so it returns to where it was.
func (s *Slots) outageStarted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.adaptive {
		s.aimd.before = math.Max(s.aimd.before, s.aimd.limit)
	}
}

func (s *Slots) outageEnded() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.adaptive && s.aimd.before > s.aimd.limit {
		s.aimd.limit = s.aimd.before
		s.aimd.epoch++
		s.c.limit.Store(int64(s.limit()))
	}
	s.aimd.before = 0
	s.wakeLocked()
}

// pauseAll reports whether a 429 should pause every call. Without the
// adaptive limit it always does: the provider asked for a pause, and its
// quota is shared. With it, a 429 among calls that otherwise succeed is the
// limit finding the provider's edge (or the provider counting a call that
// just ended), which the limit answers by stepping back; everyone pauses
// only when the provider refuses every call (no recent call succeeded).
// Pausing on 429s that were merely widespread (issue 31) turned the
// probes' refusals into shared pauses of a second or more, doubled when
// the calls sent after one were refused again: the bad day ran at 0.46 of
// its ideal time.
func (s *Slots) pauseAll() bool {
	if !s.adaptive {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.aimd.refusingAll()
}

// aimd is a loss-based concurrency limit: additive increase while calls
// succeed at full use, multiplicative decrease on a 429, or on timeouts when
// they are widespread among recent calls (one slow text is not overload).
//
// failsafe-go's adaptivelimiter was not used: it moves its limit on the
// trend of execution times (a latency gradient) and has no way to feed it a
// loss. A quota-limited API answers a 429 as fast as a success, so latency
// never rises when the quota is exceeded; the 429 itself is the signal.
type aimd struct {
	limit     float64
	max       float64
	epoch     uint64  // bumped on every decrease
	slowStart bool    // until the first loss: +1 per success, doubling per round trip
	lossAt    float64 // calls in flight when the last refused call was sent (+Inf before any)
	probing   bool    // a call at or above lossAt is out
	probes    uint64  // calls at or above lossAt granted so far
	probeWins int     // probes at lossAt that succeeded since the last loss
	// probeBackoff doubles the time between tests of the edge each time
	// one is refused in a row.
	probeBackoff int
	belowEdge    int     // refusals one below lossAt since the last probe won
	before       float64 // the limit when an outage began (0: none)
	recent       [recentWindow]resultKind
	nrecent      int // results recorded, capped at len(recent)
	pos          int
}

// resultKind is how a call ended, for judging whether a kind of failure is
// widespread among recent calls.
type resultKind uint8

const (
	kindOK resultKind = iota
	kindTimeout
	kindRateLimited
)

const (
	// aimdStart is where the limit begins: slow start reaches -c in a few
	// round trips, while a storm starting at -c would cost a wave of 429s.
	aimdStart = 4
	// aimdBeta is the multiplicative decrease.
	aimdBeta = 0.7
	// aimdPlateau slows the increase this many times within one of the
	// limit where the last loss happened: a quota's edge does not move
	// often, and each probe past it costs a 429, so the limit recovers fast
	// to just below the edge and then probes it rarely.
	aimdPlateau = 3
	// aimdProbeWins is how many calls must succeed at the level refused
	// last time before it counts as safe.
	aimdProbeWins = 3
	// aimdMaxProbeBackoff caps that doubling: the edge is tested at least
	// every 2^3 plateau steps.
	aimdMaxProbeBackoff = 3
	// recentWindow is how many recent calls judge whether timeouts (or
	// 429s) are widespread: at least half of them.
	recentWindow = 16
)

func (a *aimd) init(max float64, adaptive bool) {
	a.max = max
	a.limit = max
	if adaptive {
		a.limit = math.Min(max, aimdStart)
	}
	a.slowStart = true
	a.lossAt = math.Inf(1)
}

// blocksProbe: a call sent now would be at or above the level refused last
// time while another such probe is out.
func (a *aimd) blocksProbe(inUse int) bool {
	return a.probing && float64(inUse+1) >= a.lossAt
}

func (a *aimd) onGrant(k int) (epoch uint64, probe bool, probes uint64) {
	probe = float64(k) >= a.lossAt
	a.probing = a.probing || probe
	if probe {
		a.probes++
	}
	return a.epoch, probe, a.probes
}

// atEdge reports whether a call refused now was sent while the edge was
// being tested: the provider counts the calls it holds in its own order,
// so any of those sent at the edge may be the one it refuses. level is the
// calls in flight the refusal stands for.
func (a *aimd) atEdge(p *Permit, level float64) bool {
	// Seen from here a call is counted from its grant to its answer, a
	// little longer than the provider holds it, so a call one below the
	// level refused is at the edge too.
	return p.probe || a.probing || a.probes != p.probes || level >= a.lossAt-1
}

// onResult moves the limit on a call's result. inUse is the calls still in
// flight, this one no longer counted.
func (a *aimd) onResult(p *Permit, err error, inUse int) {
	// The level a refusal stands for: as many calls as the limit allowed
	// when it was sent (or as were in flight then, or when it came back, if
	// more). Calls granted together reach the provider in any order, so the
	// first granted may be the one refused once the provider is full: its
	// own count would put the edge too low.
	level := float64(max(p.k, p.lim, inUse+1))
	edge := a.atEdge(p, level)
	if p.probe {
		a.probing = false
		if err == nil {
			// Seen from here a call may look alone at a level while the
			// provider has already let another go, so one success proves
			// little: after a few, the level holds and the edge is above.
			a.belowEdge = 0
			if a.probeWins++; a.probeWins >= aimdProbeWins {
				a.lossAt = float64(p.k + 1)
				a.probeWins = 0
			}
		}
	}
	timeout, limited := isTimeout(err), isRateLimited(err)
	switch {
	case err == nil:
		a.record(kindOK)
	case timeout && !p.again:
		a.record(kindTimeout)
	case limited:
		a.record(kindRateLimited)
	}
	loss := limited || (timeout && !p.again && a.widespread(kindTimeout))
	switch {
	case loss && p.epoch != a.epoch:
		// Sent before the last decrease: it reports the same overload and
		// must not cut the limit again. Refusals of one round trip come
		// back in any order: the edge is the lowest level refused.
		a.lossAt = math.Min(a.lossAt, level)
		a.probeWins = 0
	case loss && edge && !a.slowStart:
		// At the edge: the limit stays just below the level refused last
		// time, without a multiplicative cut. A refused test of that level
		// means the edge has not moved: test it less often from now on. A
		// refusal one below it may be the provider's count running a call
		// ahead of ours; a second in a row moves the edge down.
		if level >= a.lossAt {
			a.probeBackoff = min(a.probeBackoff+1, aimdMaxProbeBackoff)
		} else if a.belowEdge++; a.belowEdge >= 2 {
			a.lossAt = level
			a.belowEdge = 0
		}
		a.limit = math.Max(1, math.Min(a.limit, a.lossAt-1))
		a.probeWins = 0
	case loss:
		a.lossAt = level
		a.limit = math.Max(1, a.limit*aimdBeta)
		a.epoch++
		a.slowStart = false
		a.probeWins = 0
		a.probeBackoff = 0
	case err == nil && p.full:
		switch {
		case a.slowStart:
			// +1 per success doubles the limit per round trip, but no more
			// than twice the level this call proved: successes of calls sent
			// at a lower level, coming back before the refusals of the calls
			// sent past the provider's edge, must not carry the limit on
			// past a doubling.
			a.limit = math.Max(a.limit, math.Min(a.limit+1, 2*float64(p.k)))
		case a.limit+1 >= a.lossAt && a.limit < a.lossAt+1:
			a.limit += 1 / (aimdPlateau * float64(int(1)<<a.probeBackoff) * a.limit)
		default:
			a.limit += 1 / a.limit // about +1 per round trip
		}
		a.limit = math.Min(a.limit, a.max)
	}
}

func (a *aimd) record(k resultKind) {
	a.recent[a.pos] = k
	a.pos = (a.pos + 1) % len(a.recent)
	a.nrecent = min(a.nrecent+1, len(a.recent))
}

// widespread: at least half of the recent calls (and at least 4) ended so.
func (a *aimd) widespread(k resultKind) bool {
	if a.nrecent < 4 {
		return false
	}
	n := 0
	for i := range a.nrecent {
		if a.recent[i] == k {
			n++
		}
	}
	return 2*n >= a.nrecent
}

// refusingAll: the recent calls (at least aimdStart of them) ended in 429s
// or timeouts, none answered: the provider is not at an edge the limit can
// find, it refuses everyone.
func (a *aimd) refusingAll() bool {
	if a.nrecent < aimdStart {
		return false
	}
	limited := false
	for i := range a.nrecent {
		switch a.recent[i] {
		case kindOK:
			return false
		case kindRateLimited:
			limited = true
		}
	}
	return limited
}

func isRateLimited(err error) bool {
	pe, ok := provider.AsError(err)
	return ok && pe.Outcome == outcome.UpstreamRateLimited
}

func isTimeout(err error) bool {
	pe, ok := provider.AsError(err)
	return ok && pe.Outcome == outcome.UpstreamTimeout
}

// SetShare bounds the slots to n, from outside the process (a fleet's
// budget), until until: past it no slot is granted until the next
// SetShare. A share below the slots held now grants none until enough
// calls end. n < 0 lifts the bound.
func (s *Slots) SetShare(n int, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.share = max(n, -1)
	s.leaseEnd.Store(int64(until.Sub(s.base)))
	s.changedLocked()
	if s.safeTimer != nil {
		s.safeTimer.Stop()
		s.safeTimer = nil
	}
	if s.safe > 0 && s.share >= 0 {
		// At the lease's end the safe share takes over: the rows waiting
		// for a slot are granted on it then, not at the next renewal.
		s.safeTimer = time.AfterFunc(time.Until(until), func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.changedLocked()
		})
	}
}

// changedLocked wakes what waits on the outside bound: the rows waiting
// for a slot, and the calls waiting for the lease (waitLease). Requires
// s.mu.
func (s *Slots) changedLocked() {
	close(s.renewed)
	s.renewed = make(chan struct{})
	s.wakeLocked()
}

// SetSafe sets the bound that holds once the outside bound's lease has
// passed, until until: a fleet budget's safe share, on which a member
// whose database cannot be reached goes on sending. n <= 0: none (nothing
// is sent past the lease). A lower one takes effect at once; the waiters
// are woken onto it at the lease's end from the next SetShare.
func (s *Slots) SetSafe(n int, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.safe = max(n, 0)
	s.safeEnd.Store(int64(until.Sub(s.base)))
}

// bound is the outside bound now: the share while its lease holds, then
// the safe share while it holds (onSafe), else none (ok false). Requires
// s.mu (or s.share < 0: no outside bound, ok).
func (s *Slots) bound() (n int, ok, onSafe bool) {
	if s.share < 0 {
		return -1, true, false
	}
	now := int64(time.Since(s.base))
	if now < s.leaseEnd.Load() {
		return s.share, true, false
	}
	if s.safe > 0 && now < s.safeEnd.Load() {
		return s.safe, true, true
	}
	return 0, false, false
}

// OnSafe reports whether the outside bound is the safe share now: its
// lease passed, its safe share's has not.
func (s *Slots) OnSafe() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _, on := s.bound()
	return on
}

// leaseHeld reports whether the outside bound's lease still holds, on this
// process's monotonic clock (true when there is no outside bound).
func (s *Slots) leaseHeld() bool {
	_, ok, _ := s.bound()
	return ok
}

// SetLapse records why the outside bound's lease could not be renewed
// (the budget was dropped, its database cannot be reached), for the rows
// turned away once it lapses.
func (s *Slots) SetLapse(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lapse = why
}

// Lapse is why the lease could not be renewed, as SetLapse said last.
func (s *Slots) Lapse() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lapse
}

// LapseMessage is what a row not sent because the outside bound's lease
// lapsed says, with why as its holder said it (SetLapse).
func (s *Slots) LapseMessage() string {
	why := s.Lapse()
	if why == "" {
		why = "it could not be renewed"
	}
	return "not sent: this process's share of the fleet budget (--budget) lapsed: " + why + "; nothing new is sent until it renews"
}

// Share is the outside bound now (-1: none) and whether its lease holds.
func (s *Slots) Share() (n int, held bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.share, s.leaseHeld()
}

// waitLease waits, just before a call is sent, until the outside bound's
// lease holds (at once when it does, or when there is none): a slot
// granted under a lease that passed since (while the call waited for the
// rate limit, or the process was stopped) must not send.
//
// failFast: a row that would wait for a lease to renew ends at once with
// errNoLease instead (a server answers 503 and Retry-After rather than
// hold the request until its deadline).
func (s *Slots) waitLease(ctx context.Context, stop <-chan struct{}, failFast bool) error {
	// Nearly always the lease holds: said without the lock every grant and
	// release takes (leaseEnd is atomic; a lease that holds is held whatever
	// the share).
	if int64(time.Since(s.base)) < s.leaseEnd.Load() {
		return nil
	}
	for {
		s.mu.Lock()
		// On the safe share, a slot granted above it under the share waits
		// until the calls in flight are within it.
		n, ok, onSafe := s.bound()
		if ok && (!onSafe || s.inUse <= n) {
			s.mu.Unlock()
			return nil
		}
		if !ok && failFast {
			s.mu.Unlock()
			return errNoLease
		}
		ch := s.renewed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return errStopped
		}
	}
}

// notePeak records the slots held plus rows waiting. Requires s.mu.
func (s *Slots) notePeak() {
	if d := s.inUse + s.waiters.Len(); d > s.peak {
		s.peak = d
	}
}

// TakeDemand is the calls in flight now and the most slots held plus rows
// waiting since the last TakeDemand (a fleet's budget divides its cap by
// it); the peak starts again from now.
func (s *Slots) TakeDemand() (inFlight, peak int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inFlight, peak = s.inUse, s.peak
	s.peak = s.inUse + s.waiters.Len()
	return inFlight, max(peak, s.peak)
}
