package cache

import (
	"context"
	"errors"
	"time"
)

// Store keeps entries under their keys. Every method is safe for
// concurrent use, and for other processes using the same store at once.
type Store interface {
	// Get returns what the store holds for keys (in any order, those it
	// has); the Cache checks each one before it is an answer.
	Get(ctx context.Context, keys []Key) ([]Stored, error)
	// Put writes entries, replacing any under the same key (which then
	// counts as the newest), and evicts the oldest past the size bound.
	Put(ctx context.Context, entries []Stored) error
	// Delete drops entries found damaged.
	Delete(ctx context.Context, keys []Key) error
	// AddTotals adds a run's hits and savings to the store's own.
	AddTotals(ctx context.Context, t Totals) error
	// Stats says what the store holds.
	Stats(ctx context.Context) (Stats, error)
	// Clear drops the entries stored before before (zero: all), and
	// says how many went.
	Clear(ctx context.Context, before time.Time) (int64, error)
	// Name says where the store is, for messages (a path, or the
	// database's table; never a credential).
	Name() string
	Close() error
}

// Totals are hits, and what they saved: the tokens the calls would have
// cost, and their cost at the prices given (Costed: some price was known).
type Totals struct {
	Hits                         int64
	SavedPrompt, SavedCompletion int64
	SavedUSD                     float64
	Costed                       bool
}

// Add sums two totals.
func (t Totals) Add(u Totals) Totals {
	return Totals{Hits: t.Hits + u.Hits, SavedPrompt: t.SavedPrompt + u.SavedPrompt,
		SavedCompletion: t.SavedCompletion + u.SavedCompletion, SavedUSD: t.SavedUSD + u.SavedUSD, Costed: t.Costed || u.Costed}
}

// Stats is what a store holds.
type Stats struct {
	Name     string
	Entries  int64
	Bytes    int64 // on disk (the file and its journal), or the table's size
	MaxBytes int64 // the bound; 0: none
	// Oldest and Newest are when the oldest and newest entries were
	// stored (zero when empty).
	Oldest, Newest time.Time
	// Totals since the store was made.
	Totals
}

// Errors opening a store: the caller names the way out.
var (
	// ErrDamaged: the store is not readable as a cache (bytes changed in
	// its file, or it is not a database at all).
	ErrDamaged = errors.New("damaged")
	// ErrNewer: a newer hfsent wrote it, in a format this one cannot read.
	ErrNewer = errors.New("written by a newer hfsent")
	// ErrForeign: the file is a database, but not an hfsent cache.
	ErrForeign = errors.New("not an hfsent response cache")
)

// MinMaxBytes is the smallest size bound a store takes.
const MinMaxBytes = 1 << 20
