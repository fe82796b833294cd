// Command bodyflood is many callers each sending big POST /v1/classify
// bodies to `hfsent serve` on loopback, as fast as they are answered, for
// a while: the load that measures how much memory bodies can cost the
// server. Every caller sends the same body (built once, so the callers
// cost little), of -items items whose texts fill it to -body bytes. It
// prints the answers by status and, given the server's pid, the server's
// peak resident memory (VmHWM) and its resident memory every second. With
// -slow N, N connections more each send 60 KB of headers and then hold on,
// as a slow caller (or an attacker) would.
//
//	bodyflood -url http://127.0.0.1:8000 -callers 1000 -body 1048576 -items 256 -duration 20s -pid 1234
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:8000", "the server's base URL (loopback only)")
	callers := flag.Int("callers", 1000, "callers sending at once, each on its own connection")
	size := flag.Int("body", 1<<20, "bytes in each body")
	nitems := flag.Int("items", 256, "items in each body")
	duration := flag.Duration("duration", 20*time.Second, "how long to send")
	pid := flag.Int("pid", 0, "the server's pid, for its memory (0: not measured)")
	name := flag.String("name", "run", "a label for the output")
	slow := flag.Int("slow", 0, "connections more, each sending 60 KB of headers and then nothing (held until the end)")
	flag.Parse()
	if !strings.HasPrefix(*base, "http://127.") && !strings.HasPrefix(*base, "http://localhost") {
		fmt.Fprintln(os.Stderr, "bodyflood: -url must be a loopback address")
		os.Exit(2)
	}
	// net/http's client logs each 503 a server sends a connection it
	// turns away before the request is written ("Unsolicited response").
	log.SetOutput(io.Discard)
	body, err := makeBody(*size, *nitems)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bodyflood:", err)
		os.Exit(2)
	}
	url := strings.TrimRight(*base, "/") + "/v1/classify"
	client := &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			MaxIdleConnsPerHost: *callers,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration)
	defer cancel()

	var mu sync.Mutex
	statuses := map[string]int{}
	var lat []time.Duration
	var rss []string
	done := make(chan struct{})
	go func() { // the server's memory, every second
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if *pid > 0 {
					rss = append(rss, fmt.Sprintf("%.0f", float64(status(*pid, "VmRSS"))/1024))
				}
			}
		}
	}()
	host := strings.TrimPrefix(strings.TrimRight(*base, "/"), "http://")
	slowHead := "POST /v1/classify HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("p", 60000)
	var held []net.Conn
	for range *slow {
		c, err := net.Dial("tcp", host)
		if err != nil {
			continue
		}
		_, _ = io.WriteString(c, slowHead)
		held = append(held, c)
	}
	var wg sync.WaitGroup
	for range *callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				start := time.Now()
				resp, err := client.Do(req)
				key := ""
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					key = "error"
					time.Sleep(10 * time.Millisecond)
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					key = strconv.Itoa(resp.StatusCode)
				}
				mu.Lock()
				statuses[key]++
				if key == "200" {
					lat = append(lat, time.Since(start))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(done)
	for _, c := range held {
		c.Close()
	}
	keys := make([]string, 0, len(statuses))
	for k := range statuses {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	total := 0
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, statuses[k]))
		total += statuses[k]
	}
	fmt.Printf("%s: %d callers, %d-byte bodies of %d items, %s: %d requests (%s)", *name, *callers, len(body), *nitems, *duration, total, strings.Join(parts, ", "))
	if *slow > 0 {
		fmt.Printf("; %d slow connections of 60 KB headers (%d opened)", *slow, len(held))
	}
	fmt.Println()
	if len(lat) > 0 {
		slices.Sort(lat)
		fmt.Printf("  answered 200: p50 %s  p99 %s\n", lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)*99/100].Round(time.Millisecond))
	}
	if *pid > 0 {
		fmt.Printf("  server RSS (MiB) every second: %s\n", strings.Join(rss, " "))
		fmt.Printf("  server peak RSS (VmHWM): %.1f MiB\n", float64(status(*pid, "VmHWM"))/1024)
	}
}

// makeBody is {"items": [...]} of n items, size bytes in all.
func makeBody(size, n int) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"request_id":"r%d","text":"`, i)
		// Each item's text fills its share of what is left.
		left := size - b.Len() - (n-i-1)*40 - 10
		share := left / (n - i)
		if share < 1 {
			return nil, errors.New("-body is too small for -items")
		}
		fmt.Fprintf(&b, "%d", i)
		b.WriteString(strings.Repeat("x", max(0, share-len(strconv.Itoa(i)))))
		b.WriteString(`"}`)
	}
	b.WriteString(`]}`)
	for b.Len() < size { // pad with white space, which JSON allows
		b.WriteByte(' ')
	}
	return b.Bytes(), nil
}

// status is a field of /proc/PID/status, in kB.
func status(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}
