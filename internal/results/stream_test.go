package results

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/outcome"
)

func written(t testing.TB, includeText bool, rows ...Row) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := NewWriter(&b, includeText)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func readAll(t *testing.T, b []byte, includeText bool) ([]Row, *Stream, error) {
	t.Helper()
	s, err := NewStream(bytes.NewReader(b), int64(len(b)), includeText)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	var rows []Row
	for {
		r, err := s.Next()
		if errors.Is(err, io.EOF) {
			return rows, s, nil
		}
		if err != nil {
			return rows, s, err
		}
		rows = append(rows, r)
	}
}

var sample = []Row{
	{RequestID: "a", Label: "POSITIVE", Score: 0.9987, Outcome: outcome.Success, Model: "m", Attempts: 1, LatencyMs: 12, QueuedMs: 1, StartedMs: 2, FinishedMs: 14, Text: "fine"},
	{RequestID: "b", Outcome: outcome.NotAttempted, Error: "not sent: interrupted", QueuedMs: 3, StartedMs: -1, FinishedMs: 20, Text: "two\nlines, \"quoted\""},
	{RequestID: "c", Outcome: outcome.UpstreamFailed, Model: "m", Attempts: 5, LatencyMs: 100, Error: "HTTP 503: service unavailable", StartedMs: 0, FinishedMs: 300, Text: "x"},
}

// A row read back is the row written: a kept row is rewritten unchanged.
func TestStreamRoundTrip(t *testing.T) {
	for _, text := range []bool{false, true} {
		b := written(t, text, sample...)
		rows, s, err := readAll(t, b, text)
		if err != nil {
			t.Fatal(err)
		}
		if s.Torn() {
			t.Fatal("a whole file reported torn")
		}
		if got := written(t, text, rows...); !bytes.Equal(got, b) {
			t.Fatalf("round trip changed the file:\n%s\nwant\n%s", got, b)
		}
	}
}

// Every cut of the file in the middle of its last record drops exactly that
// record; a cut at a record boundary drops nothing.
func TestStreamDropsTornLastRecord(t *testing.T) {
	b := written(t, true, sample...)
	full := len(b)
	lastStart := full - len("c,502,,,upstream_failed,m,5,100,HTTP 503: service unavailable,0,0,300,x,,,,false\n")
	for cut := lastStart; cut <= full; cut++ {
		rows, s, err := readAll(t, b[:cut], true)
		if err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		want, torn := 2, cut != lastStart
		if cut == full {
			want, torn = 3, false
		}
		if len(rows) != want || s.Torn() != torn {
			t.Fatalf("cut at %d/%d: %d rows, torn %v; want %d, %v", cut, full, len(rows), s.Torn(), want, torn)
		}
	}
	// Cuts inside the quoted, two-line text of row b.
	i := bytes.Index(b, []byte("two\n"))
	for _, cut := range []int{i + 2, i + 4, i + 8} {
		rows, s, err := readAll(t, b[:cut], true)
		if err != nil || len(rows) != 1 || !s.Torn() {
			t.Fatalf("cut inside a quoted field at %d: %d rows, torn %v, err %v", cut, len(rows), s.Torn(), err)
		}
	}
}

func TestStreamRefusesForeignFiles(t *testing.T) {
	if _, _, err := readAll(t, []byte("id,text\n1,hello\n"), false); !errors.Is(err, ErrHeader) {
		t.Fatalf("a non-results file: %v", err)
	}
	b := written(t, true, sample...)
	if _, _, err := readAll(t, b, false); err == nil || !strings.Contains(err.Error(), "with --include-text") {
		t.Fatalf("wrong --include-text: %v", err)
	}
	// Damage in the middle is not a torn tail: refuse rather than guess.
	bad := bytes.Replace(written(t, false, sample...), []byte("a,200"), []byte("a,2\"00"), 1)
	if _, _, err := readAll(t, bad, false); err == nil {
		t.Fatal("a corrupt middle record was accepted")
	}
	bad = bytes.Replace(written(t, false, sample...), []byte("not_attempted"), []byte("bogus"), 1)
	if _, _, err := readAll(t, bad, false); err == nil || !strings.Contains(err.Error(), "unknown outcome") {
		t.Fatalf("unknown outcome: %v", err)
	}
	// A file cut inside its header holds nothing yet.
	rows, _, err := readAll(t, []byte("request_id,sta"), false)
	if err != nil || len(rows) != 0 {
		t.Fatalf("torn header: %v %v", rows, err)
	}
}

// FuzzStream feeds arbitrary bytes as an earlier run's results file, as
// --resume reads it: the reader must never panic, and every row it yields
// must have a known outcome (a row it cannot vouch for is an error, not a
// guess).
func FuzzStream(f *testing.F) {
	whole := written(f, true, sample...)
	f.Add(whole, true)
	f.Add(whole[:len(whole)-7], true)
	f.Add(written(f, false, sample...), false)
	f.Add([]byte("request_id,status\n"), false)
	f.Add([]byte("request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms\nx,200,A,NaN,success,m,-1,,,,,\n"), false)
	f.Add([]byte("\""), false)
	f.Fuzz(func(t *testing.T, data []byte, includeText bool) {
		s, err := NewStream(bytes.NewReader(data), int64(len(data)), includeText)
		if err != nil {
			return
		}
		defer s.Close()
		for range 10000 {
			r, err := s.Next()
			if err != nil {
				return
			}
			if !r.Outcome.Valid() {
				t.Fatalf("row with unknown outcome %q passed", r.Outcome)
			}
		}
	})
}
