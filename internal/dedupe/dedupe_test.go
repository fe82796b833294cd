package dedupe

import (
	"fmt"
	"testing"
)

func TestLRUIsBounded(t *testing.T) {
	c := New[int](100)
	for i := range 10_000 {
		k := c.Key(fmt.Sprint("text ", i))
		_, st, f := c.Claim(k)
		if st != Lead {
			t.Fatalf("unique text %d: state %v", i, st)
		}
		c.Finish(f, i, true)
	}
	if c.Len() != 100 {
		t.Fatalf("holds %d answers, want 100", c.Len())
	}
	if v, st, _ := c.Claim(c.Key("text 9999")); st != Hit || v != 9999 {
		t.Fatalf("recent text: %v %v", v, st)
	}
	if _, st, f := c.Claim(c.Key("text 0")); st != Lead {
		t.Fatalf("evicted text: %v", st)
	} else {
		c.Finish(f, 0, false)
	}
}

func TestFlight(t *testing.T) {
	c := New[string](10)
	k := c.Key("same")
	_, st, lead := c.Claim(k)
	if st != Lead {
		t.Fatal(st)
	}
	_, st, wait := c.Claim(k)
	if st != Wait || wait != lead {
		t.Fatalf("duplicate in flight: %v", st)
	}
	_, st, wait2 := c.Claim(k)
	if st != Wait || wait2 != lead {
		t.Fatalf("second duplicate in flight: %v", st)
	}
	// A failure is not remembered: the text passes to one waiter, which
	// asks again; the other waiter, and a duplicate arriving now, wait for
	// that call instead of sending their own.
	c.Finish(lead, "", false)
	<-wait.Done()
	if _, ok := wait.Result(); ok {
		t.Fatal("failed flight reported ok")
	}
	next, lead1 := c.Follow(wait)
	next2, lead2 := c.Follow(wait2)
	if next == nil || next != next2 || !lead1 || lead2 {
		t.Fatalf("after a failure: next %p/%p, leads %v/%v; want one flight, one leader", next, next2, lead1, lead2)
	}
	if _, st, f := c.Claim(k); st != Wait || f != next {
		t.Fatalf("a duplicate after the failure: %v, want to wait for the new leader", st)
	}
	c.Finish(next, "", false) // it fails too: one of the two waiters leads
	n3, l3 := c.Follow(next)
	n4, l4 := c.Follow(next)
	if n3 == nil || n3 != n4 || l3 == l4 {
		t.Fatal("the second failure did not pass the text to exactly one waiter")
	}
	c.Finish(n3, "", false) // the other of the two waiters leads now
	n5, l5 := c.Follow(n3)
	if n5 == nil || !l5 {
		t.Fatal("the third failure did not pass the text to the last waiter")
	}
	c.Finish(n5, "", false) // nobody waits any more: the flight ends
	if _, st, lead = c.Claim(k); st != Lead {
		t.Fatalf("after failures with no waiters: %v, want a new leader", st)
	}
	c.Finish(lead, "POSITIVE", true)
	if v, st, _ := c.Claim(k); st != Hit || v != "POSITIVE" {
		t.Fatalf("after success: %v %v", v, st)
	}
	if c.Key("same") == c.Key("other") {
		t.Fatal("keys collide")
	}
}

// The least recently used answer is the one that makes room: an answer used
// again stays.
func TestLRUEvictsTheLeastRecentlyUsed(t *testing.T) {
	c := New[int](3)
	add := func(s string, v int) { c.Add(c.Key(s), v) }
	has := func(s string) bool {
		_, st, f := c.Claim(c.Key(s))
		if st == Lead {
			c.Finish(f, 0, false)
		}
		return st == Hit
	}
	add("a", 1)
	add("b", 2)
	add("c", 3)
	if !has("a") { // a is now the most recent
		t.Fatal("a missing")
	}
	add("d", 4) // b, the least recent, makes room
	if has("b") || !has("a") || !has("c") || !has("d") {
		t.Fatal("the wrong entry was evicted")
	}
	add("c", 30) // an update moves it to the front too
	add("e", 5)  // a is now the least recent
	if has("a") || !has("c") || !has("d") || !has("e") {
		t.Fatal("the wrong entry was evicted after an update")
	}
	if v, _, _ := c.Claim(c.Key("c")); v != 30 {
		t.Fatalf("c = %d, want the update", v)
	}
	if c.Len() != 3 {
		t.Fatalf("holds %d, want 3", c.Len())
	}
}

// The cache against a plain map-and-list LRU over many random operations,
// with keys chosen to collide in the index and evict often.
func TestLRUAgainstAReference(t *testing.T) {
	const size = 50
	c := New[int](size)
	type ref struct {
		order []Key // most recent first
		val   map[Key]int
	}
	r := ref{val: map[Key]int{}}
	touch := func(k Key) {
		for i, o := range r.order {
			if o == k {
				r.order = append(r.order[:i], r.order[i+1:]...)
				break
			}
		}
		r.order = append([]Key{k}, r.order...)
	}
	rng := uint64(1)
	next := func(n uint64) uint64 { rng = rng*6364136223846793005 + 1442695040888963407; return (rng >> 33) % n }
	for step := range 20000 {
		// Few distinct low words, so keys share home slots in the index.
		k := Key{next(64) << 40, next(300)}
		if next(3) == 0 {
			v := step
			c.Add(k, v)
			if _, ok := r.val[k]; !ok && len(r.order) == size {
				last := r.order[len(r.order)-1]
				r.order = r.order[:len(r.order)-1]
				delete(r.val, last)
			}
			r.val[k] = v
			touch(k)
			continue
		}
		got, st, f := c.Claim(k)
		want, ok := r.val[k]
		if ok != (st == Hit) || (ok && got != want) {
			t.Fatalf("step %d: key %v: got %v (state %v), reference %v (%v)", step, k, got, st, want, ok)
		}
		if ok {
			touch(k)
		} else {
			c.Finish(f, 0, false)
		}
	}
	if c.Len() != len(r.val) {
		t.Fatalf("holds %d, the reference %d", c.Len(), len(r.val))
	}
}
