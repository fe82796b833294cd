package cache_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/provider"

	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

func pgStore(t *testing.T, url string, maxBytes int64) (*Cache, *queue.DB) {
	t.Helper()
	db, err := queue.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, _, err := db.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return New(NewPG(db.Pool, db.URL(), maxBytes), Options{}), db
}

// TestPGCacheIsSharedByTheFleet: two members (two pools on one database)
// see each other's entries; an entry whose bytes changed in the table is
// never an answer; the bound holds; clear empties it.
func TestPGCacheIsSharedByTheFleet(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	a, db := pgStore(t, url, 0)
	b, _ := pgStore(t, url, 0)
	for i := range 500 {
		a.Put(key(i), entry(i))
	}
	closeCache(t, a)
	hits := b.Lookup(ctx, []Key{key(0), key(499), key(600)})
	if !hits[0].Found || !hits[1].Found || hits[2].Found || hits[1].Entry.Label != entry(499).Label {
		t.Fatalf("the other member's lookups: %+v", hits)
	}
	// A byte of an answer changed in the table: a miss, never that label.
	k7 := key(7)
	if _, err := db.Pool.Exec(ctx, "update hfsent.cache set val = overlay(val placing '\\x7a'::bytea from length(val) for 1) where key = $1", k7[:]); err != nil {
		t.Fatal(err)
	}
	if h := b.Lookup(ctx, []Key{key(7)}); h[0].Found {
		t.Fatalf("a changed entry answered %+v", h[0].Entry)
	}
	closeCache(t, b)
	st, err := NewPG(db.Pool, db.URL(), 0).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 499 || st.Hits != 2 || !strings.Contains(st.Name, "hfsent.cache") {
		t.Fatalf("stats %+v (the damaged entry must be gone)", st)
	}
	// Bounded: 100 entries' worth, the oldest out.
	c, _ := pgStore(t, url, 100*PGEntryBytes)
	for i := 1000; i < 1300; i++ {
		c.Put(key(i), entry(i))
	}
	closeCache(t, c)
	st, _ = NewPG(db.Pool, db.URL(), 0).Stats(ctx)
	if st.Entries > 100 || st.Entries < 50 {
		t.Fatalf("%d entries under a bound of 100", st.Entries)
	}
	c, _ = pgStore(t, url, 0)
	if h := c.Lookup(ctx, []Key{key(1000), key(1299)}); h[0].Found || !h[1].Found {
		t.Errorf("oldest kept %v, newest kept %v", h[0].Found, h[1].Found)
	}
	closeCache(t, c)
	if n, err := NewPG(db.Pool, db.URL(), 0).Clear(ctx, time.Now().Add(time.Hour)); err != nil || n != st.Entries {
		t.Fatalf("clear: %d of %d, %v", n, st.Entries, err)
	}
}

func key(i int) Key {
	return KeyOf("chat", "m", "http://h/v1/chat/completions", fmt.Appendf(nil, `{"text":"row %d"}`, i))
}

func entry(i int) Entry {
	return Entry{Label: fmt.Sprintf("label-%d", i%3), Score: 0.5, Model: "m", Usage: provider.Usage{Prompt: 40, Completion: 2, Known: true}}
}

func closeCache(t *testing.T, c *Cache) {
	t.Helper()
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
