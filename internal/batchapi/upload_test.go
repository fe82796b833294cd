package batchapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// lines is an io.Reader of n bytes of request lines, made as it is read:
// the test's own input is never in memory either.
type lines struct {
	left int64
	line []byte
	off  int
}

func newLines(n int64) *lines {
	body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"%0200d"}]}`, 0)
	return &lines{left: n, line: []byte(`{"custom_id":"r0","method":"POST","url":"/v1/chat/completions","body":` + body + "}\n")}
}

func (l *lines) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && l.left > 0 {
		k := copy(p[n:min(len(p), n+int(min(l.left, int64(len(l.line)-l.off))))], l.line[l.off:])
		n += k
		l.off = (l.off + k) % len(l.line)
		l.left -= int64(k)
	}
	return n, nil
}

// discardFiles answers POST /v1/files like OpenAI after reading the upload
// through and keeping only its size.
func discardFiles(got *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mr, err := r.MultipartReader()
		if err != nil {
			writeJSON(w, 400, `{"error":{"message":"not multipart"}}`)
			return
		}
		var n int64
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeJSON(w, 400, `{"error":{"message":"bad multipart"}}`)
				return
			}
			if part.FormName() == "file" {
				n, _ = io.Copy(io.Discard, part)
			}
		}
		got.Store(n)
		writeJSON(w, 200, fmt.Sprintf(`{"id":"file-big","object":"file","bytes":%d,"purpose":"batch","status":"processed"}`, n))
	})
}

// TestUploadStreams uploads 50 MB, of unknown size (through the pipe) and
// of known size (with a Content-Length), and checks that neither the bytes
// allocated nor the heap at its highest come near the file's size: the
// file is copied through, never held.
func TestUploadStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB uploads")
	}
	const size = 50 << 20
	for _, c := range []struct {
		name  string
		input func() io.Reader
	}{
		{"piped", func() io.Reader { return newLines(size) }},
		{"sized", func() io.Reader { return sizedLines{newLines(size)} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got atomic.Int64
			srv := httptest.NewServer(discardFiles(&got))
			defer srv.Close()
			cl := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1", Token: "sk-x"}
			var f File
			var err error
			alloc, growth := measure(func() { f, err = cl.Upload(context.Background(), "big.jsonl", c.input()) })
			if err != nil {
				t.Fatal(err)
			}
			if f.Bytes != size || got.Load() != size {
				t.Fatalf("stored %d, server read %d, want %d", f.Bytes, got.Load(), size)
			}
			t.Logf("50 MiB upload: %.1f MiB allocated in all, heap peak %.1f MiB over the start", float64(alloc)/(1<<20), float64(growth)/(1<<20))
			// Client and server both in this process; holding the file
			// once would allocate at least 50 MiB and raise the heap by
			// as much.
			const bound = 16 << 20
			if alloc > bound || growth > bound {
				t.Fatalf("allocated %d bytes, heap grew %d: the upload is held, not streamed (bound %d)", alloc, growth, bound)
			}
		})
	}
}

// measure runs f and returns the bytes it allocated in all and how far
// the heap rose above where it started, sampled every 5ms.
func measure(f func()) (alloc uint64, growth int64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
				runtime.ReadMemStats(&m)
				if m.HeapAlloc > peak.Load() {
					peak.Store(m.HeapAlloc)
				}
			}
		}
	}()
	f()
	close(stop)
	<-sampled
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, int64(peak.Load()) - int64(before.HeapAlloc)
}

// BenchmarkUpload: allocations per upload do not grow with the file
// (compare the sizes' B/op).
func BenchmarkUpload(b *testing.B) {
	for _, size := range []int64{1 << 20, 16 << 20} {
		for _, sized := range []bool{false, true} {
			b.Run(fmt.Sprintf("%dMiB/sized=%v", size>>20, sized), func(b *testing.B) {
				var got atomic.Int64
				srv := httptest.NewServer(discardFiles(&got))
				defer srv.Close()
				c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1"}
				b.SetBytes(size)
				b.ReportAllocs()
				for b.Loop() {
					var r io.Reader = newLines(size)
					if sized {
						r = sizedLines{newLines(size)}
					}
					if _, err := c.Upload(context.Background(), "b.jsonl", r); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
