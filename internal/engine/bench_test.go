package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
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

// BenchmarkRow is one row answered from the response cache ("hit")
// against one sent ("call"): the same chat client, rows and run, with the
// cache on; the calls go to a chat fake on loopback with no latency (the
// least a call can cost), the hits find the rows' entries, stored before
// the timer starts. ns/op and allocs/op are per row.
func BenchmarkRow(b *testing.B) {
	srv := fakehf.StartChat(&fakehf.Chat{NoRecord: true})
	defer srv.Close()
	open := func(b *testing.B, dir string) (*provider.Chat, *cache.Cache, cache.Keyer) {
		chat, err := provider.NewChat(provider.ChatConfig{Model: "m", Endpoint: srv.URL + "/v1/chat/completions",
			Labels: []string{"positive", "negative"}, Concurrency: 16, Timeout: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		f, err := cache.OpenFile(context.Background(), dir, 0)
		if err != nil {
			b.Fatal(err)
		}
		k, _ := cache.NewKeyer("chat", chat)
		return chat, cache.New(f, cache.Options{}), k
	}
	run := func(b *testing.B, dir string, wantCalls int64) {
		chat, c, k := open(b, dir)
		b.ReportAllocs()
		b.ResetTimer()
		sum, err := Run(context.Background(), &genSource{n: int64(b.N)}, &orderSink{t: b}, resilience.Build(chat, resilience.Config{Concurrency: 16}),
			Config{Cache: c, Keys: &k})
		b.StopTimer()
		if err != nil || sum.Rows != int64(b.N) || sum.Provider.Calls != wantCalls {
			b.Fatal(err, sum.Rows, sum.Provider.Calls)
		}
		c.Close(context.Background())
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	}
	b.Run("call", func(b *testing.B) { run(b, b.TempDir(), int64(b.N)) })
	b.Run("hit", func(b *testing.B) {
		dir := b.TempDir()
		_, c, k := open(b, dir)
		for i := range b.N {
			key, _ := k.Key(fmt.Sprint("text ", i))
			c.Put(key, cache.Entry{Label: "positive", Score: 0.9, Model: "m", Usage: provider.Usage{Prompt: 50, Completion: 3, Known: true}})
		}
		c.Close(context.Background())
		run(b, dir, 0)
	})
}
