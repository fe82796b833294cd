package results

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hfsent/hfsent/internal/outcome"
)

// BenchmarkWriter writes rows in runs of 8, as the ordered writer does;
// every Write flushes.
func BenchmarkWriter(b *testing.B) {
	row := Row{RequestID: "id-000123", Label: "POSITIVE", Score: 0.99871234, Outcome: outcome.Success,
		Model: "distilbert/distilbert-base-uncased-finetuned-sst-2-english", Attempts: 1, LatencyMs: 21, QueuedMs: 1000, StartedMs: 1001, FinishedMs: 1022}
	run := []Row{row, row, row, row, row, row, row, row}
	w, err := NewWriter(io.Discard, false)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := w.Write(run); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(8*b.N)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkStream reads a results file back, as --resume does.
func BenchmarkStream(b *testing.B) {
	row := Row{RequestID: "id-000123", Label: "POSITIVE", Score: 0.9987, Outcome: outcome.Success,
		Model: "distilbert/distilbert-base-uncased-finetuned-sst-2-english", Attempts: 1, LatencyMs: 21, QueuedMs: 1000, StartedMs: 1001, FinishedMs: 1022}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, false)
	const rows = 10000
	for range rows {
		_ = w.Write([]Row{row})
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		s, err := NewStream(bytes.NewReader(data), int64(len(data)), false)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			_, err := s.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		s.Close()
		if n != rows {
			b.Fatal(n)
		}
	}
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
}
