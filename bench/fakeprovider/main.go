// Command fakeprovider serves the fake Hugging Face API (internal/fakehf) on
// loopback for the benchmark scripts: a fixed latency, an optional capacity
// beyond which calls get 429, and a share of random 503s.
package main

import (
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	latency := flag.Duration("latency", 20*time.Millisecond, "time every call takes")
	capacity := flag.Int("capacity", 0, "calls in flight beyond which the answer is 429 with Retry-After (0: no limit)")
	retryAfter := flag.String("retry-after", "1", "Retry-After value sent with 429s")
	fail := flag.Float64("fail", 0, "share of calls answered 503 (0..1)")
	flat := flag.Bool("flat", false, "answer [{label,score}] rather than the nested form")
	addrFile := flag.String("addr-file", "", "write the bound address to this file once listening")
	flag.Parse()

	var inFlight atomic.Int64
	f := &fakehf.Fake{Latency: *latency, Flat: *flat}
	f.Script = func(n int64, texts []string, r *http.Request) fakehf.Reply {
		if *fail > 0 && rand.Float64() < *fail {
			return fakehf.Reply{Status: 503}
		}
		if *capacity > 0 {
			// Counted across the whole call so that a 429 is what an
			// over-capacity provider sends.
			cur := inFlight.Add(1)
			go func() { <-r.Context().Done(); inFlight.Add(-1) }()
			if cur > int64(*capacity) {
				return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": *retryAfter}}
			}
		}
		return fakehf.Reply{}
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Fprintln(os.Stderr, "fakeprovider listening on", ln.Addr())
	srv := &http.Server{Handler: fakehf.Handler(f)}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		fmt.Fprintf(os.Stderr, "fakeprovider: calls=%d max_in_flight=%d\n", f.Calls(), f.MaxInFlight())
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
