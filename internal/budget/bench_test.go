package budget

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkRenew is the renewals one budget row serves: each takes the
// row's lock, so their rate, with members renewing in parallel, bounds how
// many members one budget serves (docs/guides/budget.md#benchmarks).
//
//	go test -run '^$' -bench Renew ./internal/budget/
func BenchmarkRenew(b *testing.B) {
	for _, members := range []int{10, 100} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			s := openStore(b)
			ctx := context.Background()
			if _, _, err := s.Set(ctx, "b", 1000, nil, nil, nil); err != nil {
				b.Fatal(err)
			}
			r := func(i int) Report {
				return Report{Member: fmt.Sprintf("m%d", i), Host: "h", PID: i, Kind: KindWorker, Max: 12, Demand: 12,
					Timeout: time.Second, Lease: time.Minute}
			}
			for i := range members {
				if _, err := s.Renew(ctx, "b", r(i)); err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Int64
			b.SetParallelism(4)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := s.Renew(ctx, "b", r(int(n.Add(1))%members)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "renewals/s")
		})
	}
}
