package cache

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/provider"
)

func open(t *testing.T, dir string, maxBytes int64) *Cache {
	t.Helper()
	f, err := OpenFile(context.Background(), dir, maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	return New(f, Options{})
}

func key(i int) Key {
	return KeyOf("chat", "m", "http://h/v1/chat/completions", fmt.Appendf(nil, `{"text":"row %d"}`, i))
}

func entry(i int) Entry {
	return Entry{Label: fmt.Sprintf("label-%d", i%3), Score: 0.5 + float64(i%5)/10, Model: "m",
		Usage: provider.Usage{Prompt: 40 + i%7, Completion: 2, Known: true}}
}

func closeCache(t *testing.T, c *Cache) {
	t.Helper()
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 0)
	for i := range 300 {
		c.Put(key(i), entry(i))
	}
	noScore := Entry{Label: "neutral", Score: math.NaN(), Model: "m:fast", Fallback: true, Usage: provider.Usage{Cost: 1e-5, Costed: true}}
	c.Put(key(1000), noScore)
	closeCache(t, c)

	c = open(t, dir, 0)
	defer closeCache(t, c)
	keys := []Key{key(0), key(299), key(5000), key(1000), key(150)}
	hits := c.Lookup(context.Background(), keys)
	for i, want := range []int{0, 299, -1, 1000, 150} {
		h := hits[i]
		switch {
		case want < 0:
			if h.Found {
				t.Errorf("key %d found", i)
			}
		case want == 1000:
			e := h.Entry
			if !h.Found || e.Label != "neutral" || !math.IsNaN(e.Score) || !e.Fallback || e.Usage.Known || !e.Usage.Costed || e.Usage.Cost != 1e-5 || e.Model != "m:fast" {
				t.Errorf("entry %+v", h)
			}
		default:
			w := entry(want)
			if !h.Found || h.Entry.Label != w.Label || h.Entry.Score != w.Score || h.Entry.Usage.Prompt != w.Usage.Prompt || h.Entry.At.IsZero() {
				t.Errorf("key %d: %+v, want %+v", want, h, w)
			}
		}
	}
	if st := c.Stats(); st.Hits != 4 || st.Misses != 1 || st.SavedPrompt != int64(entry(0).Usage.Prompt+entry(299).Usage.Prompt+entry(150).Usage.Prompt) {
		t.Errorf("run stats %+v", st)
	}
}

// TestKeyCoversEveryPart: a key changes with each of its parts, and the
// parts cannot be shifted into one another.
func TestKeyCoversEveryPart(t *testing.T) {
	base := KeyOf("chat", "m", "http://h/x", []byte("{}"))
	for name, k := range map[string]Key{
		"kind":  KeyOf("hf", "m", "http://h/x", []byte("{}")),
		"model": KeyOf("chat", "m2", "http://h/x", []byte("{}")),
		"url":   KeyOf("chat", "m", "http://h/y", []byte("{}")),
		"body":  KeyOf("chat", "m", "http://h/x", []byte("{ }")),
		"shift": KeyOf("chat", "mhttp://h/x", "", []byte("{}")),
	} {
		if k == base {
			t.Errorf("%s: same key", name)
		}
	}
}

// TestDamagedEntryIsNeverAnAnswer changes one byte of an entry's label in
// the file: the lookup misses (and says the entry was damaged), it does
// not answer with the changed label.
func TestDamagedEntryIsNeverAnAnswer(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 0)
	c.Put(key(1), Entry{Label: "positive", Score: 0.9, Model: "m"})
	c.Put(key(2), Entry{Label: "negative", Score: 0.8, Model: "m"})
	closeCache(t, c)
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("positive"))
	if i < 0 {
		t.Fatal("label not in the file")
	}
	b[i] = 'n' // "nositive": still a string, decodes fine
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	c = open(t, dir, 0)
	hits := c.Lookup(context.Background(), []Key{key(1), key(2)})
	if hits[0].Found {
		t.Fatalf("a damaged entry answered %q", hits[0].Entry.Label)
	}
	if !hits[1].Found || hits[1].Entry.Label != "negative" {
		t.Fatalf("the sound entry: %+v", hits[1])
	}
	if st := c.Stats(); st.Damaged != 1 {
		t.Errorf("damaged %d", st.Damaged)
	}
	closeCache(t, c)
	// The damaged entry was dropped: a miss now, not damage.
	c = open(t, dir, 0)
	defer closeCache(t, c)
	if h := c.Lookup(context.Background(), []Key{key(1)}); h[0].Found || c.Stats().Damaged != 0 {
		t.Errorf("the damaged entry is still there: %+v %+v", h, c.Stats())
	}
}

// TestEveryByteChanged: whatever byte of the file changes, no lookup
// answers other than what was stored: a miss, a refusal to open, or the
// store switched off.
func TestEveryByteChanged(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 0)
	const n = 40
	for i := range n {
		c.Put(key(i), entry(i))
	}
	closeCache(t, c)
	orig, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = key(i)
	}
	step := max(1, len(orig)/600)
	opened, answered := 0, 0
	defer func() {
		t.Logf("%d bytes, %d changed one at a time: %d files opened, %d lookups answered (rightly)", len(orig), len(orig)/step, opened, answered)
		if opened == 0 || answered == 0 {
			t.Error("no changed file was opened and answered: the test proves nothing")
		}
	}()
	for off := 0; off < len(orig); off += step {
		d := t.TempDir()
		b := append([]byte(nil), orig...)
		b[off] ^= 0x5a
		if err := os.WriteFile(filepath.Join(d, FileName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := OpenFile(context.Background(), d, 0)
		if err != nil {
			continue // refused: fine
		}
		opened++
		c := New(f, Options{})
		for i, h := range c.Lookup(context.Background(), keys) {
			if h.Found {
				answered++
			}
			if h.Found && (h.Entry.Label != entry(i).Label || h.Entry.Score != entry(i).Score || h.Entry.Model != "m") {
				t.Fatalf("byte %d changed: key %d answered %+v", off, i, h.Entry)
			}
		}
		c.Close(context.Background())
	}
}

func TestRefusesDamagedNewerForeign(t *testing.T) {
	ctx := context.Background()
	// Not a database at all.
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, FileName), bytes.Repeat([]byte("garbage!"), 1024), 0o600)
	if _, err := OpenFile(ctx, d, 0); !errors.Is(err, ErrDamaged) {
		t.Errorf("garbage: %v", err)
	}
	// A newer format.
	d = t.TempDir()
	c := open(t, d, 0)
	closeCache(t, c)
	db, _ := sql.Open("sqlite", filepath.Join(d, FileName))
	if _, err := db.Exec("pragma user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := OpenFile(ctx, d, 0); !errors.Is(err, ErrNewer) || !bytes.Contains([]byte(err.Error()), []byte(FileName)) {
		t.Errorf("newer: %v (must name the file)", err)
	}
	// Someone else's SQLite database.
	d = t.TempDir()
	db, _ = sql.Open("sqlite", filepath.Join(d, FileName))
	db.Exec("create table notes (t text)")
	db.Close()
	if _, err := OpenFile(ctx, d, 0); !errors.Is(err, ErrForeign) {
		t.Errorf("foreign: %v", err)
	}
	// RemoveFile is the way out.
	if err := RemoveFile(d); err != nil {
		t.Fatal(err)
	}
	closeCache(t, open(t, d, 0))
}

// TestBounded: past --cache-max-size the oldest entries go first.
func TestBounded(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, MinMaxBytes)
	const n = 20000
	for i := range n {
		c.Put(key(i), entry(i))
	}
	closeCache(t, c)
	c = open(t, dir, MinMaxBytes)
	defer closeCache(t, c)
	st, err := c.Store().Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes > 2*MinMaxBytes || st.Entries >= n || st.Entries == 0 {
		t.Fatalf("%d entries in %d bytes, bound %d", st.Entries, st.Bytes, MinMaxBytes)
	}
	hits := c.Lookup(context.Background(), []Key{key(0), key(n - 1)})
	if hits[0].Found || !hits[1].Found {
		t.Errorf("oldest kept %v, newest kept %v", hits[0].Found, hits[1].Found)
	}
}

// TestTwoStoresShareTheFile: two openings of one file (as two processes
// do) see each other's entries, and write at once without error.
func TestTwoStoresShareTheFile(t *testing.T) {
	dir := t.TempDir()
	a, b := open(t, dir, 0), open(t, dir, 0)
	done := make(chan struct{})
	go func() {
		for i := range 2000 {
			a.Put(key(i), entry(i))
		}
		close(done)
	}()
	for i := 2000; i < 4000; i++ {
		b.Put(key(i), entry(i))
	}
	<-done
	closeCache(t, a)
	closeCache(t, b)
	c := open(t, dir, 0)
	defer closeCache(t, c)
	for _, h := range c.Lookup(context.Background(), []Key{key(1), key(1999), key(2000), key(3999)}) {
		if !h.Found {
			t.Fatal("an entry written by one opening is missing")
		}
	}
	if c.Stats().Off {
		t.Fatal("switched off")
	}
}

func TestClearAndTotals(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := open(t, dir, 0)
	old := entry(1)
	old.At = time.Now().Add(-48 * time.Hour)
	c.Put(key(1), old)
	c.Put(key(2), entry(2))
	closeCache(t, c)
	c = open(t, dir, 0)
	c.Lookup(ctx, []Key{key(1), key(2)})
	c.Saved(0.5)
	closeCache(t, c)
	f, err := OpenFile(ctx, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stats(ctx)
	if st.Entries != 2 || st.Hits != 2 || st.SavedUSD != 0.5 || !st.Costed || st.SavedPrompt == 0 {
		t.Fatalf("stats %+v", st)
	}
	if n, err := f.Clear(ctx, time.Now().Add(-24*time.Hour)); err != nil || n != 1 {
		t.Fatalf("clear --older-than: %d, %v", n, err)
	}
	if n, _ := f.Clear(ctx, time.Time{}); n != 1 {
		t.Fatalf("clear: %d", n)
	}
}

// TestNewFileOpenedAtOnce: openings of a new file at the same moment (two
// processes starting together) all find it a cache; none calls it foreign.
func TestNewFileOpenedAtOnce(t *testing.T) {
	for range 5 {
		dir := t.TempDir()
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				f, err := OpenFile(context.Background(), dir, 0)
				if err == nil {
					f.Close()
				}
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// An entry's label scores (--top-k, --multi-label) are kept and read
// back; an entry without them encodes as before them.
func TestEntryKeepsItsScores(t *testing.T) {
	e := Entry{Label: "insult;toxic", Score: 0.6, Model: "m",
		Scores: []provider.LabelScore{{Label: "toxic", Score: 0.9}, {Label: "insult", Score: 0.6}, {Label: "threat", Score: 0.1}}}
	got, err := decode(e.encode(nil))
	if err != nil || got.Label != e.Label || len(got.Scores) != 3 || got.Scores[1] != e.Scores[1] {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	plain := Entry{Label: "a", Score: 0.5, Model: "m"}
	if b := plain.encode(nil); b[1]&flagScores != 0 {
		t.Fatal("an entry without scores flags some")
	}
	b := e.encode(nil)
	if _, err := decode(b[:len(b)-3]); err == nil {
		t.Fatal("a cut entry decoded")
	}
}
