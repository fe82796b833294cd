package budget

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func TestSafeShare(t *testing.T) {
	for _, c := range []struct{ capacity, members, share, want int }{
		{12, 5, 4, 2},  // the even split, rounded down: 5 x 2 <= 12
		{12, 5, 1, 1},  // never above its share
		{12, 5, 0, 0},  // an idle worker has none
		{12, 13, 3, 0}, // more members than slots: none
		{12, 1, 12, 12},
		{12, 0, 3, 0},
	} {
		if got := SafeShare(c.capacity, c.members, c.share); got != c.want {
			t.Errorf("SafeShare(%d, %d, %d) = %d, want %d", c.capacity, c.members, c.share, got, c.want)
		}
	}
	if got := SafeCharge(2, 3); got != 3 {
		t.Fatalf("SafeCharge(2, 3) = %d: a member that has not learnt its smaller safe share is charged the one it applies", got)
	}
}

// The simulation's clock is in milliseconds: a lease of simLease, held by
// the member for nine tenths of it from when it asked, an attempt timeout
// of simTimeout (every call ends by then), a safe window of simSafe.
const (
	simLease   = 1000
	simTimeout = 300
	simSafe    = 2000
)

// simRow is a member's row in the database, as the statements keep it.
type simRow struct {
	Claim
	safe, leaseUntil int
}

// simNode is a member process: what it applies, on its own clock.
type simNode struct {
	id                 string
	kind               Kind
	max                int
	alive, cut         bool  // cut: it cannot reach the database (the others may)
	share, safe        int   // what it applies
	leaseEnd, safeEnd  int   // when its lease and its safe share end
	calls              []int // when each of its calls in flight must end
	pending            *simAnswer
	pendingAt, askedAt int
	answered           bool
}

type simAnswer struct{ share, safe int }

// bound is what the member may hold at now: its share while its lease
// holds, then its safe share while its window holds (resilience.Slots).
func (n *simNode) bound(now int) int {
	switch {
	case !n.answered:
		return 0
	case now < n.leaseEnd:
		return n.share
	case now < n.safeEnd:
		return n.safe
	}
	return 0
}

// simBudget is the database: the rows, and whether it can be reached.
type simBudget struct {
	capacity int
	rows     map[string]*simRow
	down     bool
}

// reclaim is reclaim.sql: the charge past the calls' end, all but the safe
// share; the row past the safe window too.
func (b *simBudget) reclaim(now int) {
	for id, r := range b.rows {
		switch {
		case r.leaseUntil+simSafe+simTimeout < now:
			delete(b.rows, id)
		case r.leaseUntil+simTimeout < now:
			r.Charge = min(r.Charge, r.safe)
		}
	}
}

// renew is Store.Renew at txn (at or after the member asked at asked): the
// report as Member.renew makes it, the division, the row written.
func (b *simBudget) renew(n *simNode, demand, asked, txn int) simAnswer {
	b.reclaim(txn)
	var cs []Claim
	for id, r := range b.rows {
		if id != n.id {
			c := r.Claim
			c.Live = r.leaseUntil > txn
			cs = append(cs, c)
		}
	}
	applied, appliedSafe := 0, 0
	switch held := n.answered && asked < n.leaseEnd; {
	case held:
		applied, appliedSafe = n.share, n.safe
	case n.answered && n.safe > 0 && asked < n.safeEnd:
		applied, appliedSafe = n.safe, n.safe
	}
	me := len(cs)
	cs = append(cs, Claim{ID: n.id, Kind: n.kind, Max: n.max, Demand: demand, Live: true})
	share := Grant(b.capacity, me, cs, Ideal(b.capacity, 1, cs))
	safe := SafeShare(b.capacity, len(cs), share)
	c := cs[me]
	c.Charge = Charge(share, applied, len(n.calls))
	b.rows[n.id] = &simRow{Claim: c, safe: SafeCharge(safe, appliedSafe), leaseUntil: txn + simLease}
	return simAnswer{share: share, safe: safe}
}

// Members that join and leave, renew in any order with answers late or
// lost, are killed, cut off from the database alone or all at once, fall
// back to their safe shares and come back: at every step the calls in
// flight at the provider, and the safe shares the members may fall back
// to, are within the cap.
func TestSafeShareRulesKeepTheCap(t *testing.T) {
	for seed := range uint64(300) {
		r := rand.New(rand.NewPCG(seed, 25))
		b := &simBudget{capacity: 1 + r.IntN(16), rows: map[string]*simRow{}}
		var nodes []*simNode
		join := func() {
			k := []Kind{KindServe, KindClassify, KindWorker}[r.IntN(3)]
			nodes = append(nodes, &simNode{id: fmt.Sprint(len(nodes)), kind: k, max: 1 + r.IntN(12), alive: true})
		}
		for range 2 + r.IntN(4) {
			join()
		}
		now := 0
		for step := range 4000 {
			now += r.IntN(40)
			simStep(r, b, &nodes, now, join)
			total, safes := 0, 0
			for _, n := range nodes {
				total += len(n.calls)
				if n.alive && n.answered && now < n.safeEnd {
					safes += n.safe
				}
			}
			if total > b.capacity {
				t.Fatalf("seed %d step %d: %d calls in flight at the provider, cap %d", seed, step, total, b.capacity)
			}
			if safes > b.capacity {
				t.Fatalf("seed %d step %d: the members' safe shares sum to %d, cap %d", seed, step, safes, b.capacity)
			}
		}
	}
}

// simStep ends the calls due, then makes one random event.
func simStep(r *rand.Rand, b *simBudget, nodes *[]*simNode, now int, join func()) {
	for _, n := range *nodes {
		kept := n.calls[:0]
		for _, end := range n.calls {
			if end > now {
				kept = append(kept, end)
			}
		}
		n.calls = kept
	}
	n := (*nodes)[r.IntN(len(*nodes))]
	reach := !b.down && !n.cut
	switch e := r.IntN(100); {
	case e < 30 && n.alive && n.pending == nil && reach: // it asks; the database divides at once or a little later
		txn := now + r.IntN(100)
		a := b.renew(n, r.IntN(n.max+4), now, txn)
		n.pending, n.askedAt, n.pendingAt = &a, now, txn+r.IntN(200)
	case e < 45 && n.pending != nil && now >= n.pendingAt: // the answer arrives, or is lost (the ask timed out)
		if r.IntN(5) > 0 && n.alive {
			n.share, n.safe, n.answered = n.pending.share, n.pending.safe, true
			n.leaseEnd = n.askedAt + simLease*9/10
			n.safeEnd = n.leaseEnd + simSafe
		}
		n.pending = nil
	case e < 75 && n.alive && len(n.calls) < n.bound(now): // a call starts within what it holds now
		n.calls = append(n.calls, now+1+r.IntN(simTimeout))
	case e < 80: // the database goes away for everyone, or comes back
		b.down = !b.down
	case e < 84: // this member alone is cut off from it, or reaches it again
		n.cut = !n.cut
	case e < 86 && n.alive: // kill -9: its calls end at the provider by their timeout
		n.alive = false
	case e < 88 && n.alive && len(n.calls) == 0 && n.pending == nil && reach: // it leaves (Leave)
		delete(b.rows, n.id)
		n.alive = false
	case e < 90 && len(*nodes) < 12:
		join()
	}
}

// On PostgreSQL: a renewal grants the safe share (the cap over the members,
// at most the share); a member that stops renewing keeps its whole charge
// for its lease, timeout and grace, then its safe share alone until its
// safe window has passed too, when its row goes.
func TestRenewKeepsALapsedMembersSafeShare(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	if _, _, err := s.Set(ctx, "b", 12, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	safeFor := 3 * time.Second
	renew := func(id string, demand, inFlight, applied, appliedSafe int) Renewal {
		t.Helper()
		r := report(id, KindWorker, demand, inFlight, applied)
		r.AppliedSafe, r.SafeFor = appliedSafe, safeFor
		g, err := s.Renew(ctx, "b", r)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if g := renew("a", 12, 0, 0, 0); g.Share != 12 || g.Safe != 12 {
		t.Fatalf("a alone: share %d safe %d, want 12 and 12", g.Share, g.Safe)
	}
	if g := renew("a", 12, 12, 12, 12); g.Share != 12 || g.Safe != 12 {
		t.Fatalf("a alone again: share %d safe %d", g.Share, g.Safe)
	}
	// b joins: nothing is free; a is told 6 and a safe share of 6, and is
	// charged its 12 and its safe 12 until it applies them.
	if g := renew("b", 12, 0, 0, 0); g.Share != 0 || g.Safe != 0 {
		t.Fatalf("b before a shrank: share %d safe %d, want 0 and 0", g.Share, g.Safe)
	}
	if g := renew("a", 12, 12, 12, 12); g.Share != 6 || g.Safe != 6 {
		t.Fatalf("a with b: share %d safe %d, want 6 and 6", g.Share, g.Safe)
	}
	renew("a", 12, 6, 6, 6)
	if g := renew("b", 12, 0, 0, 0); g.Share != 6 || g.Safe != 6 {
		t.Fatalf("b once a is within 6: share %d safe %d, want 6 and 6", g.Share, g.Safe)
	}
	// a is cut off (it stops renewing) holding 6, safe 6. b asks for more:
	// it gets nothing of a's until a's safe window has passed.
	lease := 300 * time.Millisecond
	time.Sleep(lease + 500*time.Millisecond + ReclaimGrace + 100*time.Millisecond)
	if g := renew("b", 12, 6, 6, 6); g.Share != 6 {
		t.Fatalf("b got %d while a may be on its safe share of 6, want 6", g.Share)
	}
	st, err := s.Status(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		if m.ID == "a" && (!m.OnSafe || m.Safe != 6 || m.Charge != 6 || m.Live) {
			t.Fatalf("a in status: %+v, want on its safe share of 6, charged 6, not live", m)
		}
	}
	time.Sleep(safeFor + 200*time.Millisecond)
	if g := renew("b", 12, 6, 6, 6); g.Share != 12 {
		t.Fatalf("b got %d after a's safe window, timeout and grace, want 12", g.Share)
	}
}
