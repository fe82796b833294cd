package engine

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// genSource makes n rows with unique texts and counts how many were read.
type genSource struct {
	n, next int64
	read    atomic.Int64
}

func (g *genSource) Next() (input.Row, error) {
	if g.next == g.n {
		return input.Row{}, io.EOF
	}
	i := g.next
	g.next++
	g.read.Add(1)
	return input.Row{Seq: i, Line: int(i) + 2, ID: fmt.Sprint("id", i), Text: fmt.Sprint("text ", i)}, nil
}

// orderSink checks order and counts; it keeps nothing per row.
type orderSink struct {
	t    testing.TB
	next int64
	byOK map[outcome.Code]int64
}

func (s *orderSink) Write(rows []results.Row) error {
	for _, r := range rows {
		if want := fmt.Sprint("id", s.next); r.RequestID != want {
			s.t.Errorf("row %s written where %s was due", r.RequestID, want)
		}
		s.next++
		if s.byOK == nil {
			s.byOK = map[outcome.Code]int64{}
		}
		s.byOK[r.Outcome]++
	}
	return nil
}

// plain guards cls with nothing but the bound of c calls in flight, as
// the embedded model is guarded.
func plain(cls provider.Classifier, c int) *resilience.Guard {
	return resilience.Build(cls, resilience.Config{Plain: true, Concurrency: c})
}

func hfClient(t testing.TB, url string, c int) provider.Classifier {
	t.Helper()
	cls, err := provider.NewHF(provider.HFConfig{Endpoint: url, Concurrency: c, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return cls
}

// While the first row is stuck, the rows behind it finish but cannot be
// written; reading stops at the window instead of buffering the file.
func TestSlowEarlyRowBoundsReading(t *testing.T) {
	release := make(chan struct{})
	fake := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		if texts[0] == "text 0" {
			<-release
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	src := &genSource{n: 5000}
	sink := &orderSink{t: t}
	const window = 64
	done := make(chan Summary)
	go func() {
		sum, err := Run(context.Background(), src, sink, plain(hfClient(t, srv.URL, 4), 4), Config{Window: window})
		if err != nil {
			t.Error(err)
		}
		done <- sum
	}()
	// Wait until the reader is blocked on the window: the count stops moving.
	var last int64 = -1
	for range 200 {
		time.Sleep(10 * time.Millisecond)
		if n := src.read.Load(); n == last && n > 0 {
			break
		} else {
			last = n
		}
	}
	// The reader goroutine reads one row ahead of the window.
	if n := src.read.Load(); n > window+1 {
		t.Fatalf("read %d rows behind a stuck first row; the window is %d", n, window)
	}
	close(release)
	sum := <-done
	if sum.Rows != 5000 || sum.Counts[outcome.Success] != 5000 || sink.next != 5000 {
		t.Fatalf("after release: %+v", sum)
	}
}

// Batches hold one slot each: -c 2 with batches of 4 has at most 2 calls in
// flight, and each call carries 4 texts.
func TestBatchHoldsOneSlot(t *testing.T) {
	var maxTexts atomic.Int64
	fake := &fakehf.Fake{Latency: 5 * time.Millisecond, Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		for m := maxTexts.Load(); int64(len(texts)) > m && !maxTexts.CompareAndSwap(m, int64(len(texts))); m = maxTexts.Load() {
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	sink := &orderSink{t: t}
	sum, err := Run(context.Background(), &genSource{n: 200}, sink, plain(hfClient(t, srv.URL, 2), 2), Config{BatchSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Counts[outcome.Success] != 200 || fake.MaxInFlight() > 2 || maxTexts.Load() != 4 {
		t.Fatalf("success %d, max in flight %d, max texts %d", sum.Counts[outcome.Success], fake.MaxInFlight(), maxTexts.Load())
	}
	if sum.Provider.Calls != fake.Calls() || sum.Provider.Calls < 50 || sum.Provider.Calls > 60 {
		t.Fatalf("calls %d (fake saw %d), want about 50", sum.Provider.Calls, fake.Calls())
	}
}

func TestIDSet(t *testing.T) {
	var s idSet
	for i := range uint64(100_000) {
		if s.add(i * 0x9E3779B97F4A7C15) {
			t.Fatalf("%d reported a duplicate", i)
		}
	}
	for i := range uint64(100_000) {
		if !s.add(i * 0x9E3779B97F4A7C15) {
			t.Fatalf("%d not found", i)
		}
	}
	if s.n != 100_000 || len(s.slots) > 100_000*2 {
		t.Fatalf("n %d, %d slots", s.n, len(s.slots))
	}
}

// A set sized for the rows a file holds never grows: growing holds the old
// table and the new one at once, the peak of a run's memory.
func TestIDSetReserved(t *testing.T) {
	var s idSet
	defer s.release()
	s.reserve(100_000)
	size := len(s.slots)
	for i := range uint64(100_000) {
		if s.add(i*0x9E3779B97F4A7C15 + 1) {
			t.Fatalf("id %d reported a duplicate", i)
		}
	}
	if len(s.slots) != size {
		t.Fatalf("the table grew from %d to %d slots for the rows it was sized for", size, len(s.slots))
	}
	if !s.add(1*0x9E3779B97F4A7C15 + 1) {
		t.Fatal("a duplicate was not found")
	}
}
