package cache

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Cache is a Store as a run uses it: lookups in batches, entries queued
// and written in batches by one goroutine (a call's answer is never held
// up by a write), and the run's hits and savings counted. A store that
// fails (damaged, unreachable, full) is switched off for the rest of the
// run with one warning: the rows it would have answered are sent, never
// answered wrongly. Safe for concurrent use.
type Cache struct {
	store Store
	log   *slog.Logger
	// advice says what to do about a store found damaged (the command's
	// flags): said in the warning.
	advice string

	off     atomic.Bool
	offOnce sync.Once
	queue   chan Stored
	bad     chan Key
	done    chan struct{}
	closed  sync.Once

	// put is a Bloom filter of the keys put in this run; with a store
	// that says it holds only what this Cache put (sole), a key outside
	// it is a miss without a lookup. On a fill (an empty cache) the
	// lookups cost a third of the CPU and, by keeping readers in the WAL,
	// its checkpoints from starting it again: 12 s and 30 MiB at 300,000
	// rows (issue 31).
	put  []atomic.Uint64
	sole interface{ Sole() bool }

	hits, misses, damaged, stored atomic.Int64
	mu                            sync.Mutex
	saved                         Totals
}

// Options tune a Cache.
type Options struct {
	Logger *slog.Logger
	// Advice words the way out of a store that failed, e.g. "run hfsent
	// cache clear, or pass --no-cache".
	Advice string
}

// queueLen bounds the entries waiting to be written: a put waits when
// they are this many (the writer commits up to writeBatch at a time).
const queueLen = 2048

// putBits is the Bloom filter's size (1 MiB): three bits a key, taken
// from the key itself (a SHA-256), a few false positives in a thousand at
// a million keys; a false positive only costs a lookup.
const putBits = 1 << 23

func bloomBits(k Key) [3]uint64 {
	return [3]uint64{binary.LittleEndian.Uint64(k[0:]) % putBits, binary.LittleEndian.Uint64(k[8:]) % putBits, binary.LittleEndian.Uint64(k[16:]) % putBits}
}

func (c *Cache) markPut(k Key) {
	for _, b := range bloomBits(k) {
		c.put[b/64].Or(1 << (b % 64))
	}
}

// mayHold is false when the store cannot hold k: it holds only what this
// Cache put, and k was not put.
func (c *Cache) mayHold(k Key) bool {
	if c.sole == nil || !c.sole.Sole() {
		return true
	}
	for _, b := range bloomBits(k) {
		if c.put[b/64].Load()&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

// New starts a Cache in front of s; Close stops it.
func New(s Store, o Options) *Cache {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cache{store: s, log: o.Logger, advice: o.Advice, queue: make(chan Stored, queueLen), bad: make(chan Key, queueLen), done: make(chan struct{})}
	if so, ok := s.(interface{ Sole() bool }); ok {
		c.sole, c.put = so, make([]atomic.Uint64, putBits/64)
	}
	go c.write()
	return c
}

// Name is where the store is.
func (c *Cache) Name() string { return c.store.Name() }

// Store is the store behind the cache.
func (c *Cache) Store() Store { return c.store }

// Hit is what a lookup found for one key.
type Hit struct {
	Entry Entry
	Found bool
}

// Lookup finds keys' entries; hits[i] is keys[i]'s. An entry whose key or
// checksum does not hold is damage: a miss (counted, and deleted), never
// an answer. A store that fails makes every key a miss, now and for the
// rest of the run.
func (c *Cache) Lookup(ctx context.Context, keys []Key) []Hit {
	hits := c.Peek(ctx, keys)
	c.Count(hits)
	return hits
}

// Peek is Lookup without counting the hits and misses: for a lookup made
// ahead of the rows it is for (engine.Pipeline.Prefetch), some of which
// may never be answered; Count counts those that are.
func (c *Cache) Peek(ctx context.Context, keys []Key) []Hit {
	hits := make([]Hit, len(keys))
	if c.off.Load() || len(keys) == 0 {
		return hits
	}
	ask := keys
	if c.sole != nil && c.sole.Sole() {
		ask = make([]Key, 0, len(keys))
		for _, k := range keys {
			if c.mayHold(k) {
				ask = append(ask, k)
			}
		}
	}
	if len(ask) == 0 {
		return hits
	}
	got, err := c.store.Get(ctx, ask)
	if err != nil {
		c.fail("read", err)
		return hits
	}
	byKey := make(map[Key]Stored, len(got))
	for _, s := range got {
		byKey[s.Key] = s
	}
	for i, k := range keys {
		s, ok := byKey[k]
		if !ok {
			continue
		}
		e, ok := s.open(k)
		if !ok {
			c.damaged.Add(1)
			select {
			case c.bad <- k:
			default:
			}
			continue
		}
		hits[i] = Hit{Entry: e, Found: true}
	}
	return hits
}

// Count counts hits (found or not) as the run's hits and misses, with
// what the hits saved.
func (c *Cache) Count(hits []Hit) {
	var saved Totals
	for _, h := range hits {
		if !h.Found {
			c.misses.Add(1)
			continue
		}
		saved.Hits++
		if e := h.Entry; e.Usage.Known {
			saved.SavedPrompt += int64(e.Usage.Prompt)
			saved.SavedCompletion += int64(e.Usage.Completion)
		}
	}
	c.hits.Add(saved.Hits)
	if saved.Hits > 0 {
		c.addSaved(saved)
	}
}

// Saved adds what a hit saved in USD (the engine prices it).
func (c *Cache) Saved(usd float64) { c.addSaved(Totals{SavedUSD: usd, Costed: true}) }

func (c *Cache) addSaved(t Totals) {
	c.mu.Lock()
	c.saved = c.saved.Add(t)
	c.mu.Unlock()
}

// Put queues e to be stored under k; it waits while the queue is full.
// Only a final, usable answer may be put (the caller's rule).
func (c *Cache) Put(k Key, e Entry) {
	if c.off.Load() || e.Label == "" {
		return
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	if c.put != nil {
		c.markPut(k)
	}
	select {
	case c.queue <- seal(Record{Key: k, Entry: e}):
	case <-c.done:
	}
}

// The writer commits up to writeBatch entries at a time, waiting up to
// writeWait for a batch to fill. Each commit costs the readers their page
// cache (SQLite drops a connection's pages when another has written) and
// the WAL a frame per page touched: committing as soon as anything waited
// meant a commit every few entries on a fast endpoint, and most of a
// fill's CPU (issue 31). An entry still queued when the process is killed
// is lost, never half written: the next run asks its row again.
const (
	// 2048 a second. A batch touches most leaves of the key index once,
	// so bigger batches write fewer pages an entry; but the batch and the
	// queue behind it are held in memory. Since the index holds 13 bytes
	// an entry (file format 2), 8192 and 4096 wrote no faster at 300,000
	// rows and held 6 and 3 MiB more of the resident set (issue 31's
	// 60 MiB).
	writeBatch = 2048
	writeWait  = time.Second
	// writeIdle: a queue quiet this long is committed at once.
	writeIdle = 20 * time.Millisecond
)

// write commits what is queued, in batches, until the queue is closed.
func (c *Cache) write() {
	defer close(c.done)
	batch := make([]Stored, 0, writeBatch)
	for open := true; open; {
		s, ok := <-c.queue
		if !ok {
			break
		}
		batch = append(batch[:0], s)
		open = c.gather(&batch)
		c.dropBad()
		if c.off.Load() {
			continue
		}
		if err := c.store.Put(context.Background(), batch); err != nil {
			c.fail("write", err)
			continue
		}
		c.stored.Add(int64(len(batch)))
	}
	c.dropBad()
}

// gather adds queued entries to batch until it holds writeBatch, writeWait
// has passed, no entry came for writeIdle, or the queue is closed (false:
// commit and stop). The idle rule keeps a quiet run's answers (serve's
// occasional request) visible to its next lookup at once; a fill, whose
// entries come without pause, still commits in big batches.
func (c *Cache) gather(batch *[]Stored) bool {
	t := time.NewTimer(writeWait)
	defer t.Stop()
	idle := time.NewTimer(writeIdle)
	defer idle.Stop()
	for len(*batch) < writeBatch {
		select {
		case s, ok := <-c.queue:
			if !ok {
				return false
			}
			*batch = append(*batch, s)
			idle.Reset(writeIdle)
		case <-idle.C:
			return true
		case <-t.C:
			return true
		}
	}
	return true
}

// dropBad deletes the entries found damaged so far.
func (c *Cache) dropBad() {
	var keys []Key
	for {
		select {
		case k := <-c.bad:
			keys = append(keys, k)
			continue
		default:
		}
		break
	}
	if len(keys) > 0 && !c.off.Load() {
		if err := c.store.Delete(context.Background(), keys); err != nil {
			c.fail("write", err)
		}
	}
}

// fail switches the cache off for the run, saying so once.
func (c *Cache) fail(what string, err error) {
	c.offOnce.Do(func() {
		c.off.Store(true)
		msg := "the response cache cannot be used for the rest of this run; rows are sent to the provider"
		if errors.Is(err, ErrDamaged) {
			msg = "the response cache is damaged and is not used for the rest of this run; rows are sent to the provider"
		}
		if c.advice != "" {
			msg += "; " + c.advice
		}
		c.log.Warn(msg, "cache", c.store.Name(), "op", what, "err", err.Error())
	})
}

// RunStats is what a run did with the cache.
type RunStats struct {
	Hits, Misses int64
	// Damaged: entries found whose checksum failed (asked again).
	Damaged int64
	Stored  int64 // entries written
	Off     bool  // the store failed and was switched off
	Totals        // hits and what they saved
}

// Stats is what the run did so far.
func (c *Cache) Stats() RunStats {
	c.mu.Lock()
	t := c.saved
	c.mu.Unlock()
	return RunStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Damaged: c.damaged.Load(), Stored: c.stored.Load(), Off: c.off.Load(), Totals: t}
}

// Close writes what is queued and the run's totals, and closes the store.
func (c *Cache) Close(ctx context.Context) error {
	var err error
	c.closed.Do(func() {
		close(c.queue)
		<-c.done
		st := c.Stats()
		if st.Damaged > 0 {
			c.log.Warn("cache entries failed their checksum and were asked again (and replaced)", "cache", c.store.Name(), "entries", st.Damaged)
		}
		if !c.off.Load() && st.Hits > 0 {
			err = c.store.AddTotals(ctx, st.Totals)
		}
		if cerr := c.store.Close(); err == nil {
			err = cerr
		}
	})
	return err
}
