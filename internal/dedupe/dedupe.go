// Package dedupe remembers answers by a hash of the text they answer, so
// that identical texts in one run are sent once: a bounded LRU of finished
// answers, plus the calls in flight (a singleflight), so that a duplicate
// that arrives while the first copy is still being asked waits for it
// instead of sending a second call. When that call fails, the text is
// handed to one of the waiters, which asks again while the others keep
// waiting: one call at a time per text, never one per waiter.
//
// Keys are 128-bit hashes of the text, not the text: an entry costs the same
// whatever the text's length, and a million unique texts still take only the
// LRU's fixed size. Two maphash seeds make a false match (which would give a
// row another text's label) a 2^-128 event.
package dedupe

import (
	"hash/maphash"
	"sync"
)

// Key identifies a text.
type Key [2]uint64

// DefaultSize is how many answers the cache holds when no size is given:
// with an answer of a label, a score and a model, about 70 bytes an entry,
// so a few MiB.
const DefaultSize = 65536

// Cache is an LRU of answers of type V plus the calls in flight. It is safe
// for concurrent use.
//
// The LRU is a slice of entries linked by index, not container/list, and
// its index an open-addressing table of positions, not a map: with
// pointer-free answers the whole cache is two allocations the garbage
// collector need not scan, about 45 bytes an answer.
type Cache[V any] struct {
	seed1, seed2 maphash.Seed
	size         int

	mu      sync.Mutex
	entries []entry[V] // grows to size, then entries are reused
	index   []int32    // positions in entries by key, -1 when free; at most half full
	head    int32      // most recent; -1 when empty
	tail    int32      // least recent
	flights map[Key]*Flight[V]
}

type entry[V any] struct {
	key        Key
	val        V
	prev, next int32 // -1: none
}

// Flight is one call in flight for a key; duplicates wait on Done.
type Flight[V any] struct {
	key     Key
	done    chan struct{}
	val     V
	ok      bool
	waiters int        // guarded by the cache's mu
	next    *Flight[V] // after a failure: the flight one waiter leads
	led     bool       // next has its leader
}

// Done is closed when the leader has finished.
func (f *Flight[V]) Done() <-chan struct{} { return f.done }

// Result is the leader's answer; ok is false when the leader failed (the
// waiter should then call Follow). Call it only after Done is closed.
func (f *Flight[V]) Result() (V, bool) { return f.val, f.ok }

// New returns a cache holding at most size answers (DefaultSize if size < 1).
func New[V any](size int) *Cache[V] {
	if size < 1 {
		size = DefaultSize
	}
	return &Cache[V]{
		seed1:   maphash.MakeSeed(),
		seed2:   maphash.MakeSeed(),
		size:    size,
		head:    -1,
		tail:    -1,
		flights: make(map[Key]*Flight[V]),
	}
}

// Key hashes a text.
func (c *Cache[V]) Key(text string) Key {
	return Key{maphash.String(c.seed1, text), maphash.String(c.seed2, text)}
}

// State is what Claim found.
type State int

const (
	// Hit: the answer is known; use it.
	Hit State = iota
	// Wait: another caller is asking; wait on the Flight.
	Wait
	// Lead: the caller must ask, then call Finish on the Flight.
	Lead
)

// Claim looks text up. On Hit the value is returned; on Wait the flight to
// wait on (the caller must wait for it, and after a failure call Follow);
// on Lead a new flight the caller must Finish.
func (c *Cache[V]) Claim(k Key) (V, State, *Flight[V]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := c.find(k); i >= 0 {
		c.toFront(i)
		return c.entries[i].val, Hit, nil
	}
	var zero V
	if f, ok := c.flights[k]; ok {
		f.waiters++
		return zero, Wait, f
	}
	f := &Flight[V]{key: k, done: make(chan struct{})}
	c.flights[k] = f
	return zero, Lead, f
}

// Finish ends a flight. With ok the value is remembered and handed to the
// waiters; without, nothing is remembered (a failure may not repeat) and the
// text passes to one waiter, which must ask and Finish the next flight.
func (c *Cache[V]) Finish(f *Flight[V], v V, ok bool) {
	c.mu.Lock()
	switch {
	case ok:
		delete(c.flights, f.key)
		c.addLocked(f.key, v)
	case f.waiters > 0:
		f.next = &Flight[V]{key: f.key, done: make(chan struct{}), waiters: f.waiters - 1}
		c.flights[f.key] = f.next
	default:
		delete(c.flights, f.key)
	}
	f.val, f.ok = v, ok
	c.mu.Unlock()
	close(f.done)
}

// Follow is for a waiter whose flight failed: it returns the flight that
// follows, and lead is true for exactly one waiter, which must ask and
// Finish it; the others wait on it.
func (c *Cache[V]) Follow(f *Flight[V]) (next *Flight[V], lead bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.next == nil {
		return nil, false
	}
	lead = !f.led
	f.led = true
	return f.next, lead
}

// Add remembers an answer found elsewhere (a row kept by --resume).
func (c *Cache[V]) Add(k Key, v V) {
	c.mu.Lock()
	c.addLocked(k, v)
	c.mu.Unlock()
}

func (c *Cache[V]) addLocked(k Key, v V) {
	if i := c.find(k); i >= 0 {
		c.entries[i].val = v
		c.toFront(i)
		return
	}
	var i int32
	if len(c.entries) < c.size {
		if len(c.entries) == cap(c.entries) {
			// Grow by doubling, but never past size.
			grown := make([]entry[V], len(c.entries), min(c.size, max(1024, 2*cap(c.entries))))
			copy(grown, c.entries)
			c.entries = grown
		}
		i = int32(len(c.entries))
		c.entries = append(c.entries, entry[V]{prev: -1, next: -1})
	} else {
		// Full: the least recent entry makes room.
		i = c.tail
		c.unlink(i)
		c.remove(c.entries[i].key)
	}
	c.entries[i].key, c.entries[i].val = k, v
	c.insert(k, i)
	c.pushFront(i)
}

// find returns k's position in entries, or -1.
func (c *Cache[V]) find(k Key) int32 {
	if len(c.index) == 0 {
		return -1
	}
	mask := uint64(len(c.index) - 1)
	for s := k[0] & mask; ; s = (s + 1) & mask {
		switch i := c.index[s]; {
		case i < 0:
			return -1
		case c.entries[i].key == k:
			return i
		}
	}
}

// insert records that k is at position i; k is not in the index.
func (c *Cache[V]) insert(k Key, i int32) {
	if 2*(len(c.entries)) > len(c.index) {
		c.rehash(max(2048, 2*len(c.index)))
	}
	mask := uint64(len(c.index) - 1)
	s := k[0] & mask
	for c.index[s] >= 0 {
		s = (s + 1) & mask
	}
	c.index[s] = i
}

// remove takes k out of the index, moving back the entries after it in its
// run (linear probing needs no tombstones then).
func (c *Cache[V]) remove(k Key) {
	mask := uint64(len(c.index) - 1)
	s := k[0] & mask
	for c.entries[c.index[s]].key != k {
		s = (s + 1) & mask
	}
	for {
		c.index[s] = -1
		t := s
		for {
			t = (t + 1) & mask
			i := c.index[t]
			if i < 0 {
				return
			}
			// The entry at t may move to the gap at s only if its home is
			// not between s (exclusive) and t (inclusive), cyclically.
			home := c.entries[i].key[0] & mask
			if (t > s && (home <= s || home > t)) || (t < s && home <= s && home > t) {
				c.index[s] = i
				s = t
				break
			}
		}
	}
}

// rehash makes the index n positions (a power of two) and fills it again.
func (c *Cache[V]) rehash(n int) {
	c.index = make([]int32, n)
	for j := range c.index {
		c.index[j] = -1
	}
	mask := uint64(n - 1)
	for i := range c.entries {
		if c.entries[i].prev < 0 && c.entries[i].next < 0 && c.head != int32(i) {
			continue // not linked: not in the cache
		}
		s := c.entries[i].key[0] & mask
		for c.index[s] >= 0 {
			s = (s + 1) & mask
		}
		c.index[s] = int32(i)
	}
}

func (c *Cache[V]) toFront(i int32) {
	if c.head == i {
		return
	}
	c.unlink(i)
	c.pushFront(i)
}

func (c *Cache[V]) unlink(i int32) {
	e := &c.entries[i]
	if e.prev >= 0 {
		c.entries[e.prev].next = e.next
	} else {
		c.head = e.next
	}
	if e.next >= 0 {
		c.entries[e.next].prev = e.prev
	} else {
		c.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (c *Cache[V]) pushFront(i int32) {
	e := &c.entries[i]
	e.prev, e.next = -1, c.head
	if c.head >= 0 {
		c.entries[c.head].prev = i
	}
	c.head = i
	if c.tail < 0 {
		c.tail = i
	}
}

// Len is the number of answers held.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
