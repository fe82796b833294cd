package batchrun

import (
	"encoding/json"
	"sort"
)

// Rows is a set of input positions (0-based), kept as sorted, disjoint
// ranges: a batch's rows are mostly runs of neighbours, so the journal and
// memory hold a few numbers per batch, not one per row.
type Rows struct {
	r [][2]int64 // [first, last], both in the set
}

// Add appends seq, which must be above every position already in the set
// (rows are added in input order).
func (s *Rows) Add(seq int64) {
	if n := len(s.r); n > 0 && s.r[n-1][1]+1 == seq {
		s.r[n-1][1] = seq
		return
	}
	s.r = append(s.r, [2]int64{seq, seq})
}

// Has reports whether seq is in the set.
func (s *Rows) Has(seq int64) bool {
	i := sort.Search(len(s.r), func(i int) bool { return s.r[i][1] >= seq })
	return i < len(s.r) && s.r[i][0] <= seq
}

// Len is how many positions the set holds.
func (s *Rows) Len() int64 {
	var n int64
	for _, r := range s.r {
		n += r[1] - r[0] + 1
	}
	return n
}

// Each calls f for every position, in order, until f returns false.
func (s *Rows) Each(f func(seq int64) bool) {
	for _, r := range s.r {
		for q := r[0]; q <= r[1]; q++ {
			if !f(q) {
				return
			}
		}
	}
}

// Last is the highest position (-1 when empty).
func (s *Rows) Last() int64 {
	if len(s.r) == 0 {
		return -1
	}
	return s.r[len(s.r)-1][1]
}

func (s Rows) MarshalJSON() ([]byte, error) {
	if s.r == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(s.r)
}

func (s *Rows) UnmarshalJSON(b []byte) error {
	var r [][2]int64
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	for i, x := range r {
		if x[0] < 0 || x[1] < x[0] || (i > 0 && x[0] <= r[i-1][1]) {
			return errBadRows
		}
	}
	s.r = r
	return nil
}
