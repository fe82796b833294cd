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
	"container/list"
	"hash/maphash"
	"sync"
)

// Key identifies a text.
type Key [2]uint64

// DefaultSize is how many answers the cache holds when no size is given:
// about 100 bytes an entry, so a few MiB.
const DefaultSize = 65536

// Cache is an LRU of answers of type V plus the calls in flight. It is safe
// for concurrent use.
type Cache[V any] struct {
	seed1, seed2 maphash.Seed
	size         int

	mu      sync.Mutex
	lru     *list.List // of *entry[V], most recent first
	entries map[Key]*list.Element
	flights map[Key]*Flight[V]
}

type entry[V any] struct {
	key Key
	val V
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
		lru:     list.New(),
		entries: make(map[Key]*list.Element),
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
	if el, ok := c.entries[k]; ok {
		c.lru.MoveToFront(el)
		return el.Value.(*entry[V]).val, Hit, nil
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
	if el, ok := c.entries[k]; ok {
		el.Value.(*entry[V]).val = v
		c.lru.MoveToFront(el)
		return
	}
	if c.lru.Len() >= c.size {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.entries, old.Value.(*entry[V]).key)
	}
	c.entries[k] = c.lru.PushFront(&entry[V]{key: k, val: v})
}

// Len is the number of answers held.
func (c *Cache[V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
