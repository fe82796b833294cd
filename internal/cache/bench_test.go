package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hfsent/hfsent/internal/provider"
)

// BenchmarkFileSize stores b.N entries of a chat model's answers (a label,
// a score, the model's id, the usage) and reports what the file takes per
// entry and per million entries (bench/cache.sh runs it with 1000000x).
func BenchmarkFileSize(b *testing.B) {
	dir := b.TempDir()
	f, err := OpenFile(context.Background(), dir, 0)
	if err != nil {
		b.Fatal(err)
	}
	c := New(f, Options{})
	b.ResetTimer()
	for i := range b.N {
		k := KeyOf("chat", "meta-llama/Llama-3.1-8B-Instruct", "https://router.huggingface.co/v1/chat/completions", fmt.Appendf(nil, `{"text":"row %d"}`, i))
		c.Put(k, Entry{Label: []string{"positive", "negative", "neutral"}[i%3], Score: 0.9 + float64(i%100)/1000,
			Model: "meta-llama/Llama-3.1-8B-Instruct", Usage: provider.Usage{Prompt: 40 + i%200, Completion: 3, Known: true}})
	}
	if err := c.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(st.Size())/float64(b.N), "bytes/entry")
	b.ReportMetric(float64(st.Size())/float64(b.N)*1e6/(1<<20), "MiB/1M_entries")
}
