package budget

import "slices"

// Divide divides cap among the live claims (by index; a lapsed claim gets
// nothing), each step max-min fair among its members, -c bounding every
// want, and lapsed members' charges held back from cap first:
//
//  1. each busy batch member's floor (at most its demand): a batch is
//     never starved;
//  2. the servers' demand, at least one slot each (a first request finds
//     one);
//  3. the batches' demand, from what is left less the servers' headroom;
//  4. the servers' headroom (a quarter of their demand, at least one), so
//     that a rise in their traffic between two renewals finds a free slot;
//  5. what the batches still want of that headroom is lent to them, and
//     taken from the servers: work-conserving, a slot a server does not use
//     is not held idle while a batch waits for one.
//
// lent[i] is the part of share[i] that is the servers' headroom lent to
// batch member i: the member applies it until it next asks for a renewal,
// not until its lease ends (Member), so that it is granted afresh, against
// the servers' latest demand, at every renewal. The shares sum to at most
// cap less the lapsed charges.
func Divide(capacity, floor int, cs []Claim) (share, lent []int) {
	share, lent = make([]int, len(cs)), make([]int, len(cs))
	avail := capacity
	for _, c := range cs {
		if !c.Live {
			avail -= max(c.Charge, 0)
		}
	}
	if avail <= 0 {
		return share, lent
	}
	need, room, want, fl := make([]int, len(cs)), make([]int, len(cs)), make([]int, len(cs)), make([]int, len(cs))
	var serves, batches []int // indexes
	reserve := 0
	for i, c := range cs {
		if !c.Live || c.Max <= 0 {
			continue
		}
		d := min(max(c.Demand, 0), c.Max)
		switch {
		case c.Kind.Interactive():
			need[i] = min(c.Max, max(d, 1))
			room[i] = min(c.Max, d+max(1, (d+3)/4)) - need[i]
			reserve += room[i]
			serves = append(serves, i)
		case d > 0:
			want[i], fl[i] = d, min(floor, d)
			batches = append(batches, i)
		}
	}
	avail -= fill(avail, batches, fl, share, cs)
	floors := slices.Clone(share)
	avail -= fill(avail, serves, need, share, cs)
	rest := make([]int, len(cs)) // the batches' demand above their floors
	for _, i := range batches {
		rest[i] = want[i] - floors[i]
	}
	own := fill(avail-min(avail, reserve), batches, rest, share, cs)
	avail -= own
	held := make([]int, len(cs))
	heldSum := fill(avail, serves, room, held, cs)
	// What the batches still want of the headroom is lent to them: their
	// division is made again, floors aside, with it added, so that it is
	// max-min fair over the whole of what each holds.
	wanted := 0
	for _, i := range batches {
		wanted += want[i] - share[i]
	}
	lend := min(heldSum, wanted)
	whole := floors
	fill(own+lend, batches, rest, whole, cs)
	for _, i := range batches {
		lent[i] = max(0, whole[i]-share[i])
		share[i] = whole[i]
	}
	kept := make([]int, len(cs))
	fill(heldSum-lend, serves, held, kept, cs)
	for _, i := range serves {
		share[i] += kept[i]
	}
	return share, lent
}

// LentOf is the part of a grant that is lent headroom: a grant cut below
// the ideal share (the others' charges leave less) is cut from the lent
// slots first.
func LentOf(grant, ideal, lent int) int {
	return max(0, min(grant, lent-(ideal-grant)))
}
