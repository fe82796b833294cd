package budget

import (
	"cmp"
	"slices"
)

// Kind is what a member is: a server's demand is met first, the batch
// kinds (classify, worker) share what is left.
type Kind string

const (
	KindServe    Kind = "serve"
	KindClassify Kind = "classify"
	KindWorker   Kind = "worker"
)

// Interactive reports whether k's demand comes before the batches'.
func (k Kind) Interactive() bool { return k == KindServe }

// Claim is one member as the allocator sees it.
type Claim struct {
	ID     string
	Kind   Kind
	Max    int // its -c: it can use no more
	Demand int // the peak of its calls in flight plus waiting over the last interval
	Charge int // what counts against the cap for it until it renews
	// RPSCharge is what counts against the budget's rate for it.
	RPSCharge float64
	Live      bool // its lease holds; a lapsed member keeps its charge, and wants nothing
}

// Ideal divides cap among the live claims (the result is by index; a
// lapsed claim's share is 0): Divide's shares, the lent slots included.
func Ideal(capacity, floor int, cs []Claim) []int {
	share, _ := Divide(capacity, floor, cs)
	return share
}

// fill adds to share[i], for i in idx, a max-min fair division of avail by
// want[i]: every member gets its want or the same level as the others,
// within one; the units left over after the level go to members in ID
// order, so that a division does not move from one renewal to the next
// when nothing changed. It returns what it handed out.
func fill(avail int, idx []int, want, share []int, cs []Claim) int {
	if avail <= 0 || len(idx) == 0 {
		return 0
	}
	order := slices.Clone(idx)
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(want[a], want[b]), cmp.Compare(cs[a].ID, cs[b].ID))
	})
	given := 0
	left := avail
	for k, i := range order {
		n := len(order) - k
		level := left / n
		if want[i] <= level {
			share[i] += want[i]
			given += want[i]
			left -= want[i]
			continue
		}
		// Everyone from here wants more than the level: each gets it, and
		// the remainder goes one each in ID order.
		rest := slices.Clone(order[k:])
		slices.SortFunc(rest, func(a, b int) int { return cmp.Compare(cs[a].ID, cs[b].ID) })
		extra := left - level*n
		for _, j := range rest {
			g := level
			if extra > 0 && want[j] > level {
				g++
				extra--
			}
			share[j] += g
			given += g
		}
		return given
	}
	return given
}

// Grant is what member i may hold from now: its ideal share, but no more
// than the cap less every other member's charge (their calls may still be
// in flight up to it, whatever their new shares), and never below zero.
func Grant(capacity int, i int, cs []Claim, ideal []int) int {
	others := 0
	for j, c := range cs {
		if j != i {
			others += max(c.Charge, 0)
		}
	}
	return max(0, min(ideal[i], capacity-others))
}

// Charge is what counts against the cap for a member granted share, that
// applied applied when it asked and had inFlight calls out then: until it
// renews again it may hold up to the larger of its new share and the old
// one (it learns of the new one only when the answer comes), and calls
// above both only end.
func Charge(share, applied, inFlight int) int {
	return max(share, applied, inFlight, 0)
}

// GrantRate is member i's part of the budget's rate: the rate divided in
// proportion to the ideal shares (the whole rate to those who hold a
// share), but no more than the rate less every other member's rate charge
// (the rate it applies until it renews, at least). A member's rate charge
// is the larger of what it is granted and what it applied when it asked,
// as for the cap, so the rates applied never sum above the budget's.
func GrantRate(rps float64, i int, cs []Claim, ideal []int) float64 {
	total, others := 0, 0.0
	for j, c := range cs {
		total += ideal[j]
		if j != i {
			others += max(c.RPSCharge, 0)
		}
	}
	if total == 0 || ideal[i] == 0 {
		return 0
	}
	return max(0, min(rps*float64(ideal[i])/float64(total), rps-others))
}
