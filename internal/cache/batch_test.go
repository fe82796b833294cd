package cache

import (
	"context"
	"sync"
	"testing"
)

// countingStore is a File that records the size of each Put.
type countingStore struct {
	*File
	mu   sync.Mutex
	puts []int
}

func (s *countingStore) Put(ctx context.Context, e []Stored) error {
	s.mu.Lock()
	s.puts = append(s.puts, len(e))
	s.mu.Unlock()
	return s.File.Put(ctx, e)
}

// TestWriterCommitsInBatches: entries put faster than they are committed
// go in batches larger than the old 256 (each commit costs every reader
// its page cache), and Close commits what is still waiting, however few:
// every entry is there when the file is opened again.
func TestWriterCommitsInBatches(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f, err := OpenFile(ctx, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := &countingStore{File: f}
	c := New(s, Options{})
	const n = 3*writeBatch + 5 // the last few are committed by Close only
	for i := range n {
		c.Put(key(i), entry(i))
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	biggest, sum := 0, 0
	for _, p := range s.puts {
		biggest, sum = max(biggest, p), sum+p
	}
	if sum != n || biggest <= 256 {
		t.Fatalf("puts %v: want %d entries in all, some batch over 256", s.puts, n)
	}
	c = open(t, dir, 0)
	defer closeCache(t, c)
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = key(i)
	}
	for i, h := range c.Lookup(ctx, keys) {
		if !h.Found || h.Entry.Label != entry(i).Label {
			t.Fatalf("entry %d after reopening: %+v", i, h)
		}
	}
}
