package engine

import (
	"context"
	"sync"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
)

// Looking rows up in the response cache ahead of their submission. A
// queue worker knows its next rows (its reservations) some round trips
// before it submits them, one at a time, as its calls end. Looked up only
// then, each row waited for a lookup in the shared cache, a database round
// trip on the one admission goroutine, before its call: in
// bench/queue_vs_classify.sh that kept a worker's calls in flight to 7.0
// of its 8 on average, against 7.65 with --no-cache (issue 31, item 3).
// Prefetch looks them up in the background; admission then takes what it
// found, and asks the store only for the rows it did not find fresh.

// prefetchFresh is how long a prefetched lookup stands in for a lookup at
// admission. Older, the row is looked up again: another process may have
// stored its answer since (a miss taken on trust costs a call, never a
// wrong answer).
const prefetchFresh = time.Second

// prefetchMax bounds the lookups kept: rows prefetched and never submitted
// (a reservation given back) are dropped when they go stale.
const prefetchMax = 4096

type prefetched struct {
	hit cache.Hit
	at  time.Time
}

// prefetch is the lookups made ahead, by key.
type prefetch struct {
	mu   sync.Mutex
	by   map[cache.Key]prefetched
	busy sync.WaitGroup // lookups on their way (Close waits for them)
}

// Prefetch looks up, in the background, the response cache's answers to
// texts that are to be submitted soon. Without a cache it does nothing.
func (p *Pipeline) Prefetch(texts []string) {
	ks := p.stages[0].Keys
	if p.cfg.Cache == nil || ks == nil || len(texts) == 0 {
		return
	}
	keys := make([]cache.Key, 0, len(texts))
	for _, t := range texts {
		if k, ok := ks.Key(t); ok {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	p.pre.busy.Add(1)
	go func() {
		defer p.pre.busy.Done()
		at := time.Now()
		hits := p.cfg.Cache.Peek(context.Background(), keys)
		p.pre.mu.Lock()
		defer p.pre.mu.Unlock()
		if p.pre.by == nil {
			p.pre.by = make(map[cache.Key]prefetched, len(keys))
		}
		if len(p.pre.by)+len(keys) > prefetchMax {
			p.pre.dropStale(time.Now())
		}
		for i, k := range keys {
			if len(p.pre.by) >= prefetchMax {
				break
			}
			p.pre.by[k] = prefetched{hits[i], at}
		}
	}()
}

// dropStale forgets the lookups no longer fresh (mu held).
func (f *prefetch) dropStale(now time.Time) {
	for k, v := range f.by {
		if now.Sub(v.at) >= prefetchFresh {
			delete(f.by, k)
		}
	}
}

// take is the fresh lookup prefetched for k, taken (ok false: none).
func (f *prefetch) take(k cache.Key, now time.Time) (cache.Hit, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.by[k]
	if !ok {
		return cache.Hit{}, false
	}
	delete(f.by, k)
	return v.hit, now.Sub(v.at) < prefetchFresh
}
