package engine

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// countingStore counts the lookups that reach the store.
type countingStore struct {
	cache.Store
	gets atomic.Int64
}

func (s *countingStore) Get(ctx context.Context, keys []cache.Key) ([]cache.Stored, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, keys)
}

// TestPrefetchSparesAdmissionTheLookup: rows looked up ahead (a queue
// worker's reservations) are admitted without a lookup of their own, one
// at a time as a worker submits them: the hits answered without a call,
// the misses sent, each counted once. A lookup gone stale is made again.
func TestPrefetchSparesAdmissionTheLookup(t *testing.T) {
	fake := &fakehf.Chat{}
	srv := fakehf.StartChat(fake)
	defer srv.Close()
	dir := t.TempDir()
	url := srv.URL + "/v1/chat/completions"
	known := texts(5, "known %d: a lovely repair")
	chatRun{url: url, dir: dir}.run(t, known) // the cache holds these

	chat, err := provider.NewChat(provider.ChatConfig{Model: "m", Endpoint: url, Labels: []string{"positive", "negative"}, Concurrency: 4, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f, err := cache.OpenFile(context.Background(), dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	store := &countingStore{Store: f}
	c := cache.New(store, cache.Options{})
	k, _ := cache.NewKeyer("chat", chat)
	g := resilience.Build(chat, resilience.Config{Concurrency: 4, Retries: 0})
	p := NewPipeline(context.Background(), g, Config{Cache: c, Keys: &k})

	fresh := append(texts(5, "new %d: a broken hinge"), known...)
	p.Prefetch(fresh)
	p.pre.busy.Wait()
	stale := []string{known[0] + " again", "stale: a broken hinge"}
	p.Prefetch(stale)
	p.pre.busy.Wait()
	p.pre.mu.Lock()
	for _, s := range stale {
		key, _ := k.Key(s)
		v := p.pre.by[key]
		v.at = v.at.Add(-prefetchFresh)
		p.pre.by[key] = v
	}
	p.pre.mu.Unlock()
	lookups := store.gets.Load()

	got := make(chan results.Row, 16)
	submit := func(seq int, text string) {
		p.Submit(&Job{Row: input.Row{Seq: int64(seq), ID: text, Text: text}, Done: func(r results.Row) { got <- r }})
		<-got // one at a time, as a worker's rows come
	}
	calls := fake.Calls()
	for i, text := range fresh {
		submit(i, text)
	}
	if n := store.gets.Load() - lookups; n != 0 {
		t.Errorf("%d lookups at admission for rows prefetched", n)
	}
	if n := fake.Calls() - calls; n != 5 {
		t.Errorf("%d calls for 5 rows prefetched as misses", n)
	}
	for i, text := range stale {
		submit(len(fresh)+i, text)
	}
	if n := store.gets.Load() - lookups; n != 2 {
		t.Errorf("%d lookups for 2 rows whose prefetch went stale, want 2", n)
	}
	p.Close()
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Hits != 5 || st.Misses != 7 {
		t.Errorf("counted %d hits and %d misses, want 5 and 7", st.Hits, st.Misses)
	}
}
