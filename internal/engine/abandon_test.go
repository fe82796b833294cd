package engine

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/hfsent/hfsent/internal/input"
)

// blockedSource yields its rows, then blocks as a pipe whose writer is
// idle does.
type blockedSource struct {
	rows []input.Row
	wait chan struct{}
}

func (b *blockedSource) Next() (input.Row, error) {
	if len(b.rows) == 0 {
		<-b.wait
		return input.Row{}, io.EOF
	}
	r := b.rows[0]
	b.rows = b.rows[1:]
	return r, nil
}

// Abandonable hands over the rows read, then ends with the context even
// while the source is blocked.
func TestAbandonableEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	src := &blockedSource{rows: []input.Row{{ID: "a"}, {ID: "b"}}, wait: make(chan struct{})}
	defer close(src.wait)
	a := Abandonable(ctx, src)
	for _, want := range []string{"a", "b"} {
		if r, err := a.Next(); err != nil || r.ID != want {
			t.Fatalf("got %q, %v; want %q", r.ID, err, want)
		}
	}
	cancel()
	for range 2 {
		if _, err := a.Next(); !errors.Is(err, context.Canceled) {
			t.Fatalf("after the context ended: %v, want context.Canceled", err)
		}
	}
}
