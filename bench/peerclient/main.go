// Command peerclient is the floor hfsent's own throughput is compared with:
// the plainest correct Go client of the same API (one shared net/http client,
// -c goroutines each posting a row and decoding the answer), with no CSV, no
// resilience and no ordered output. bench/throughput.sh runs it against the
// same fake in the same sitting, so "hfsent / peer" says what hfsent's
// pipeline costs apart from what the machine and net/http cost.
//
//	peerclient -url http://127.0.0.1:PORT -rows 20000 -c 64
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "", "the fake provider's base URL (loopback only)")
	rows := flag.Int("rows", 20000, "rows to send")
	conc := flag.Int("c", 64, "calls in flight")
	flag.Parse()
	if *url == "" || *rows < 1 || *conc < 1 || *conc > 4096 {
		fmt.Fprintln(os.Stderr, "usage: peerclient -url URL [-rows N] [-c N]")
		os.Exit(2)
	}
	client := &http.Client{Transport: &http.Transport{
		MaxConnsPerHost: *conc, MaxIdleConnsPerHost: *conc, MaxIdleConns: *conc,
	}, Timeout: 30 * time.Second}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range *conc {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(*rows) {
					return
				}
				body, _ := json.Marshal(map[string]string{"inputs": "review: fine " + strconv.FormatInt(i, 10)})
				resp, err := client.Post(*url, "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Add(1)
					continue
				}
				var ans [][]struct {
					Label string  `json:"label"`
					Score float64 `json:"score"`
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || json.Unmarshal(b, &ans) != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	fmt.Printf("peer rows=%d failed=%d elapsed=%.3fs rows/s=%.1f\n", *rows, failed.Load(), el, float64(*rows)/el)
}
