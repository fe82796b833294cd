package queue

import (
	"sync/atomic"
	"time"
)

// rowLease is a row's lease as this worker sees it, on its own monotonic
// clock: from just before the round trip that claimed, renewed or promoted
// it (so never later than the database's lease_until, which is taken in
// the round trip), for the lease less leaseMargin. The database counts a
// running row against the caps until its lease_until; past it another
// worker may take the row, or its place under the global cap. So a call is
// sent only while Held: a worker stopped (SIGSTOP, a long pause) or cut off
// from the database past its lease does not send, on waking, a row it had
// claimed, reserved or was about to start, before it learns its lease ended
// (engine.Job.Lease, checked just before the call). The monotonic clock is
// not stretched by a wall-clock step; it does run on while the process is
// stopped, which is the point.
type rowLease struct {
	base time.Time    // the worker's: ends count from it
	end  atomic.Int64 // nanoseconds since base
	// lapsed: the lease was lost (a swap that did not commit); Held is
	// false for good.
	lapsed atomic.Bool
	// slot, for a reservation started in the place of a row that finished
	// (loop.finish), is that row's lease until the swap commits: the
	// reservation runs in its place under the global cap, so it is sent
	// only while both hold. nil: the row's own place.
	slot atomic.Pointer[rowLease]
}

// leaseMargin is how much sooner than the database a worker takes its
// lease to end: a tenth of the lease, at most a second. It covers the call
// just sent reaching the provider and a lease that passes while a call
// checked just before it is on its way.
func leaseMargin(lease time.Duration) time.Duration {
	return min(lease/10, time.Second)
}

// Held reports whether the row may be sent now: its lease holds, and so
// does the lease of the place it runs in.
func (l *rowLease) Held() bool {
	now := int64(time.Since(l.base))
	if !l.holds(now) {
		return false
	}
	s := l.slot.Load()
	return s == nil || s.holds(now)
}

func (l *rowLease) holds(now int64) bool { return !l.lapsed.Load() && now < l.end.Load() }

// extend moves the lease's end to from+d (less the margin) when later:
// from is when the round trip that took or renewed it was sent.
func (l *rowLease) extend(from time.Time, d time.Duration) {
	end := int64(from.Sub(l.base) + d - leaseMargin(d))
	for cur := l.end.Load(); end > cur && !l.end.CompareAndSwap(cur, end); cur = l.end.Load() {
	}
}
