package budget

import "time"

// returnLent stops applying the lent part of the share (the servers'
// headroom, lent to this batch member until its next renewal: Divide) as
// the member asks for that renewal, so that what it applies while it waits
// for the answer, and reports as applied, is its own part only: the lent
// slots are granted afresh, against the servers' latest demand, at every
// renewal, and a renewal that fails does not keep them until the lease
// ends. The calls already in the lent slots only end; they are reported
// in flight, and charged until they have. It returns the share applied
// until now, lent slots included: what the member's demand is judged by.
func (m *Member) returnLent(asked time.Time) int {
	had := int(m.share.Load())
	l := int(m.lent.Swap(0))
	if l <= 0 || !m.held(asked) {
		return had
	}
	own := max(0, had-l)
	m.share.Store(int64(own))
	m.g.SetShare(own, m.guardRPS, m.base.Add(time.Duration(m.leaseEnd.Load())))
	return had
}
