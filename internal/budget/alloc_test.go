package budget

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func live(id string, k Kind, max, demand int) Claim {
	return Claim{ID: id, Kind: k, Max: max, Demand: demand, Live: true}
}

// Servers' demand is met first; the batches share the rest, each with at
// least its floor; the servers' headroom is held for them only when no
// batch wants it, and lent to the batches otherwise.
func TestIdealServersFirst(t *testing.T) {
	cs := []Claim{
		live("s1", KindServe, 12, 2), live("s2", KindServe, 12, 2), live("s3", KindServe, 12, 2),
		live("w1", KindWorker, 12, 12), live("w2", KindWorker, 12, 12),
	}
	share, lent := Divide(12, 1, cs)
	// Each server its 2; their headroom (1 each) lent to the workers, who
	// share the 6 left fairly.
	if fmt.Sprint(share) != "[2 2 2 3 3]" || sum(lent) != 3 || lent[0]+lent[1]+lent[2] != 0 {
		t.Fatalf("shares %v lent %v, want [2 2 2 3 3] with the servers' 3 of headroom lent", share, lent)
	}
	// Workers that want little leave the servers their headroom.
	cs[3].Demand, cs[4].Demand = 1, 1
	if share, lent = Divide(12, 1, cs); fmt.Sprint(share) != "[3 3 3 1 1]" || sum(lent) != 0 {
		t.Fatalf("shares %v lent %v, want [3 3 3 1 1]: the workers want 1 each, the servers keep 2 plus 1", share, lent)
	}
	// A worker that wants 2 more gets one of the 3 left and one of the
	// headroom; the servers keep the other two.
	cs[3].Demand = 3
	if share, lent = Divide(12, 1, cs); fmt.Sprint(share) != "[3 3 2 3 1]" || fmt.Sprint(lent) != "[0 0 0 1 0]" {
		t.Fatalf("shares %v lent %v, want [3 3 2 3 1], w1 lent 1", share, lent)
	}
}

func TestIdealBatchesShareFairly(t *testing.T) {
	cs := []Claim{live("a", KindWorker, 12, 12), live("b", KindClassify, 12, 12), live("c", KindWorker, 12, 2)}
	got := Ideal(12, 1, cs)
	// c wants 2 and gets them; a and b split the other 10.
	if fmt.Sprint(got) != "[5 5 2]" {
		t.Fatalf("shares %v, want [5 5 2]", got)
	}
}

// Servers that want everything leave each busy batch its floor.
func TestIdealBatchFloor(t *testing.T) {
	cs := []Claim{live("s", KindServe, 100, 100), live("w1", KindWorker, 12, 12), live("w2", KindWorker, 12, 12), live("idle", KindWorker, 12, 0)}
	got := Ideal(10, 2, cs)
	if fmt.Sprint(got) != "[6 2 2 0]" {
		t.Fatalf("shares %v, want [6 2 2 0] (each busy worker keeps its floor of 2, the idle one none)", got)
	}
	if g := Ideal(10, 0, cs); g[1] != 0 || g[0] != 10 {
		t.Fatalf("floor 0: shares %v, want the server to take all 10", g)
	}
}

// A lapsed member's charge is held back from the division until it is
// reclaimed; it wants nothing itself.
func TestIdealHoldsLapsedCharges(t *testing.T) {
	cs := []Claim{{ID: "dead", Kind: KindWorker, Max: 12, Demand: 12, Charge: 6}, live("w", KindWorker, 12, 12)}
	got := Ideal(12, 1, cs)
	if fmt.Sprint(got) != "[0 6]" {
		t.Fatalf("shares %v, want [0 6]", got)
	}
	if g := Grant(12, 1, cs, got); g != 6 {
		t.Fatalf("grant %d, want 6", g)
	}
}

// A server with no traffic keeps one slot, so that its first request does
// not wait for a renewal; -c bounds every want.
func TestIdealIdleServerKeepsOne(t *testing.T) {
	// A server's headroom is lent to a batch that wants it, and held for
	// the server otherwise.
	if got := Ideal(12, 1, []Claim{live("s", KindServe, 12, 8), live("w", KindWorker, 12, 12)}); fmt.Sprint(got) != "[8 4]" {
		t.Fatalf("shares %v, want [8 4] (8, its headroom of 2 lent to the worker)", got)
	}
	if got := Ideal(12, 1, []Claim{live("s", KindServe, 12, 8), live("w", KindWorker, 12, 2)}); fmt.Sprint(got) != "[10 2]" {
		t.Fatalf("shares %v, want [10 2] (8 plus 2 headroom, the worker its 2)", got)
	}
	// An idle server's one slot is not lent.
	if got := Ideal(12, 1, []Claim{live("s", KindServe, 12, 0), live("w", KindWorker, 12, 12)}); fmt.Sprint(got) != "[1 11]" {
		t.Fatalf("shares %v, want [1 11]", got)
	}
	got := Ideal(12, 1, []Claim{live("s", KindServe, 4, 0), live("busy", KindServe, 4, 20)})
	if fmt.Sprint(got) != "[1 4]" {
		t.Fatalf("shares %v, want [1 4]", got)
	}
}

// The grant is the ideal share, less what the others' charges leave.
func TestGrantWithinOthersCharges(t *testing.T) {
	cs := []Claim{live("a", KindWorker, 12, 12), live("b", KindWorker, 12, 12)}
	cs[0].Charge = 10 // a held 10 and has not renewed since b joined
	ideal := Ideal(12, 1, cs)
	if ideal[1] != 6 {
		t.Fatalf("ideal %v", ideal)
	}
	if g := Grant(12, 1, cs, ideal); g != 2 {
		t.Fatalf("b granted %d, want 2 (12 less a's charge of 10)", g)
	}
	cs[0].Charge = 14 // the cap was lowered under a
	if g := Grant(12, 1, cs, ideal); g != 0 {
		t.Fatalf("b granted %d, want 0", g)
	}
}

func TestCharge(t *testing.T) {
	for _, c := range []struct{ share, applied, inFlight, want int }{
		{4, 8, 8, 8}, // shrinking: the old share counts until the member renews under the new one
		{4, 4, 6, 6}, // calls above the share only end: they count until they have
		{8, 4, 2, 8}, // growing: the new share counts at once
		{0, 0, 0, 0},
	} {
		if got := Charge(c.share, c.applied, c.inFlight); got != c.want {
			t.Errorf("Charge(%d, %d, %d) = %d, want %d", c.share, c.applied, c.inFlight, got, c.want)
		}
	}
}

// Over random members, the ideal shares never sum above the cap less the
// lapsed charges, nobody gets more than its -c, servers are short of their
// demand only when batches hold no more than their floors, and the
// division is work-conserving: while a batch member wants more than it
// holds, no slot is left over and no server holds headroom.
func TestIdealBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		capacity, floor := 1+r.IntN(40), r.IntN(4)
		var cs []Claim
		held := 0
		for i := range 1 + r.IntN(8) {
			k := []Kind{KindServe, KindClassify, KindWorker}[r.IntN(3)]
			c := Claim{ID: fmt.Sprint(i), Kind: k, Max: 1 + r.IntN(16), Demand: r.IntN(20), Live: r.IntN(5) > 0}
			if !c.Live {
				c.Charge = r.IntN(4)
				held += c.Charge
			}
			cs = append(cs, c)
		}
		got, lent := Divide(capacity, floor, cs)
		if s := sum(got); s > max(0, capacity-held) {
			t.Fatalf("cap %d held %d: shares %v sum to %d\n%+v", capacity, held, got, s, cs)
		}
		batchAboveFloor, serveShort, batchShort, serveRoom := false, false, false, false
		for i, c := range cs {
			if got[i] > c.Max || (!c.Live && got[i] != 0) || lent[i] > got[i] || (c.Kind.Interactive() && lent[i] != 0) {
				t.Fatalf("member %+v got %d lent %d", c, got[i], lent[i])
			}
			d := min(c.Demand, c.Max)
			if !c.Live {
				continue
			}
			if c.Kind.Interactive() {
				serveShort = serveShort || got[i] < max(1, d)
				serveRoom = serveRoom || got[i] > max(1, d)
				continue
			}
			batchAboveFloor = batchAboveFloor || got[i] > min(floor, d)
			batchShort = batchShort || got[i] < d
		}
		if serveShort && batchAboveFloor {
			t.Fatalf("a server is short while a batch holds more than its floor: cap %d floor %d shares %v\n%+v", capacity, floor, got, cs)
		}
		if batchShort && (serveRoom || sum(got) < max(0, capacity-held)) {
			t.Fatalf("a batch wants more while slots are idle or held as headroom: cap %d held %d shares %v lent %v\n%+v", capacity, held, got, lent, cs)
		}
	}
}

// simMember is one process in the simulation of the renewal rules.
type simMember struct {
	Claim
	applied  int // the share it enforces
	lent     int // the part of applied lent from the servers' headroom
	valid    bool
	inFlight int
	pending  *[2]int // a granted share and its lent part, whose answer has not arrived yet
}

// The rules keep the cap whatever the order of renewals, answers that
// arrive late or never, calls that start and end, and members that lapse:
// a simulation drives them at random and counts the calls in flight over
// all members after every step.
func TestRulesKeepTheCap(t *testing.T) {
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		capacity := 1 + r.IntN(16)
		var ms []*simMember
		for i := range 2 + r.IntN(5) {
			k := []Kind{KindServe, KindClassify, KindWorker}[r.IntN(3)]
			ms = append(ms, &simMember{Claim: Claim{ID: fmt.Sprint(i), Kind: k, Max: 1 + r.IntN(12), Live: true}})
		}
		for step := range 3000 {
			m := ms[r.IntN(len(ms))]
			switch r.IntN(6) {
			case 0: // it renews: the database divides under the lock
				cs := make([]Claim, len(ms))
				me := 0
				for j, o := range ms {
					cs[j] = o.Claim
					if o == m {
						me = j
					}
				}
				cs[me].Demand = r.IntN(m.Max + 4)
				// As it asks, it stops applying its lent slots (returnLent).
				m.applied, m.lent = m.applied-m.lent, 0
				ideal, lent := Divide(capacity, 1, cs)
				g := Grant(capacity, me, cs, ideal)
				applied := m.applied
				if !m.valid {
					applied = 0
				}
				m.Claim.Demand, m.Claim.Charge = cs[me].Demand, Charge(g, applied, m.inFlight)
				m.pending = &[2]int{g, LentOf(g, ideal[me], lent[me])}
			case 1: // the answer arrives (or is lost: the pending share is dropped)
				if m.pending != nil {
					if r.IntN(4) > 0 {
						m.applied, m.lent, m.valid = m.pending[0], m.pending[1], true
					}
					m.pending = nil
				}
			case 2, 3: // a call starts if the share allows it
				if m.valid && m.inFlight < m.applied {
					m.inFlight++
				}
			case 4: // a call ends
				if m.inFlight > 0 {
					m.inFlight--
				}
			case 5: // its lease passes on its own clock: it starts nothing more
				if r.IntN(10) == 0 {
					m.valid = false
				}
			}
			total := 0
			for _, o := range ms {
				total += o.inFlight
			}
			if total > capacity {
				t.Fatalf("seed %d step %d: %d calls in flight, cap %d", seed, step, total, capacity)
			}
		}
	}
}

// The rate is divided as the shares are, and a member is granted no more
// than the rate less the others' rate charges.
func TestGrantRate(t *testing.T) {
	cs := []Claim{live("a", KindWorker, 12, 12), live("b", KindWorker, 12, 12), live("idle", KindWorker, 12, 0)}
	ideal := Ideal(12, 1, cs)
	if got := GrantRate(30, 0, cs, ideal); got != 15 {
		t.Fatalf("a's rate %g, want 15 (half of 30: the idle member has no share)", got)
	}
	cs[1].RPSCharge = 25 // b still applies 25 from before a joined
	if got := GrantRate(30, 0, cs, ideal); got != 5 {
		t.Fatalf("a's rate %g, want 5 (30 less b's 25)", got)
	}
	if got := GrantRate(30, 2, cs, ideal); got != 0 {
		t.Fatalf("the idle member's rate %g, want 0", got)
	}
	// Renewals in any order keep the rates charged within the budget's.
	r := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		n := 1 + r.IntN(6)
		var cs []Claim
		for i := range n {
			cs = append(cs, live(fmt.Sprint(i), KindWorker, 1+r.IntN(12), r.IntN(14)))
		}
		rps, charged := 1+r.Float64()*50, 0.0
		for range 20 {
			i := r.IntN(n)
			cs[i].Demand = r.IntN(14)
			g := GrantRate(rps, i, cs, Ideal(12, 1, cs))
			applied := cs[i].RPSCharge * r.Float64() // what it applies is at most its charge
			cs[i].RPSCharge = max(g, applied)
			charged = 0
			for _, c := range cs {
				charged += c.RPSCharge
			}
			if charged > rps*(1+1e-9) {
				t.Fatalf("rate charges %g over the budget's %g: %+v", charged, rps, cs)
			}
		}
	}
}
