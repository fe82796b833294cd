package cache

import (
	"context"
	"testing"
)

// getCounter is a File that counts the keys asked of it.
type getCounter struct {
	*File
	asked int
}

func (s *getCounter) Get(ctx context.Context, keys []Key) ([]Stored, error) {
	s.asked += len(keys)
	return s.File.Get(ctx, keys)
}

// TestEmptyCacheSkipsLookups: on a cache opened empty, a key never put is
// a miss without asking the store, a key put is looked up (and found once
// committed); once another process has written to the file, every key is
// asked again, so its entries are hits.
func TestEmptyCacheSkipsLookups(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	f1, err := OpenFile(ctx, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	s1 := &getCounter{File: f1}
	c1 := New(s1, Options{})
	defer closeCache(t, c1)
	if hits := c1.Lookup(ctx, []Key{key(1), key(2)}); hits[0].Found || hits[1].Found || s1.asked != 0 {
		t.Fatalf("empty cache: %+v, %d keys asked of the store", hits, s1.asked)
	}
	// Another process (a second File on the same file) stores key 2.
	c2 := open(t, dir, 0)
	c2.Put(key(2), entry(2))
	closeCache(t, c2)
	// This one stores key 1; its commit shows the other's entry.
	c1.Put(key(1), entry(1))
	if err := s1.Put(ctx, []Stored{seal(Record{Key: key(3), Entry: entry(3)})}); err != nil {
		t.Fatal(err)
	}
	hits := c1.Lookup(ctx, []Key{key(2), key(3)})
	if !hits[0].Found || !hits[1].Found || s1.asked != 2 {
		t.Fatalf("after another process wrote: %+v, %d keys asked", hits, s1.asked)
	}
}
