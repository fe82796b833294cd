package engine

import (
	"hash/maphash"
	"math/bits"
)

// IDs is the set of request ids met so far, for Rules.Check's seen: kept
// as 64-bit hashes in an idSet, 10 to 15 bytes an id rather than the whole
// id; a false duplicate needs a collision of odds 2^-64. Every door that
// reads many rows (a CSV run, queue push) keeps its ids in one.
type IDs struct {
	seed maphash.Seed
	set  idSet
}

// NewIDs returns an empty set sized for expected ids (0: unknown).
func NewIDs(expected int64) *IDs {
	x := &IDs{seed: maphash.MakeSeed()}
	x.set.reserve(expected)
	return x
}

// Seen reports whether id came before, and remembers it.
func (x *IDs) Seen(id string) bool { return x.set.add(maphash.String(x.seed, id)) }

// Release gives the set's table back; the set is empty after it.
func (x *IDs) Release() { x.set.release() }

// idSet is the set of row-id hashes seen, for duplicate detection: an
// open-addressing table of bare uint64s, 10 to 15 bytes a row. A Go map of
// uint64 costs about 36 bytes a row (measured at a million ids), which at a
// million rows was a third of the run's memory. The table lives outside the
// garbage collector's heap where it can (allocTable): it is the one thing
// that grows with the input, and on the heap the collector's headroom would
// double it.
type idSet struct {
	slots []uint64 // 0 marks an empty slot
	n     int
}

// add inserts h and reports whether it was already there.
func (s *idSet) add(h uint64) (dup bool) {
	if h == 0 {
		h = 1 // 0 marks empty; merging two hashes of 2^64 costs nothing real
	}
	if 5*(s.n+1) > 4*len(s.slots) { // keep the load under 0.8
		s.grow()
	}
	for i := s.index(h); ; i = (i + 1) % len(s.slots) {
		switch s.slots[i] {
		case h:
			return true
		case 0:
			s.slots[i] = h
			s.n++
			return false
		}
	}
}

// index maps h onto the table without needing a power-of-two size, so the
// table can grow by half rather than double.
func (s *idSet) index(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(s.slots)))
	return int(hi)
}

func (s *idSet) grow() {
	old := s.slots
	s.slots = allocTable(max(1024, len(old)+len(old)/2))
	s.n = 0
	for _, h := range old {
		if h != 0 {
			s.add(h)
		}
	}
	freeTable(old)
}

// reserve sizes an empty set for n ids at once, so that it never grows
// (growing holds the old table and the new one together, at the peak of a
// run's memory).
func (s *idSet) reserve(n int64) {
	if s.slots != nil || n <= 0 || n > 1<<32 {
		return
	}
	s.slots = allocTable(int(max(1024, n*5/4+1)))
}

// release gives the table back; the set is empty after it.
func (s *idSet) release() {
	freeTable(s.slots)
	s.slots, s.n = nil, 0
}
