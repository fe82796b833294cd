package engine

import (
	"context"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// BenchmarkEngine runs b.N rows through the engine and the real HF client
// against an in-process fake with no latency: the engine's own cost per row
// (plus loopback HTTP).
func BenchmarkEngine(b *testing.B) {
	for _, bc := range []struct {
		name  string
		batch int
	}{{"batch=1", 1}, {"batch=16", 16}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := fakehf.Start(&fakehf.Fake{NoRecord: true})
			defer srv.Close()
			cls := plain(hfClient(b, srv.URL, 64), 64)
			b.ReportAllocs()
			b.ResetTimer()
			sum, err := Run(context.Background(), &genSource{n: int64(b.N)}, &orderSink{t: b}, cls,
				Config{BatchSize: bc.batch, Dedupe: true})
			if err != nil || sum.Rows != int64(b.N) {
				b.Fatal(err, sum.Rows)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
