// Command loadgen offers a constant rate of POST /feedback-sentiment
// requests to `hfsent serve` on loopback (vegeta as a library, open-loop:
// requests are sent on schedule whether or not earlier ones were answered)
// and prints what came back: throughput, latency percentiles for answered
// and rejected requests apart, and, given the server's pid, its CPU time per
// request and its resident memory over the run (read from /proc).
//
//	loadgen -url http://127.0.0.1:8000 -rate 2560 -duration 10s -pid 1234
//
// With -clients N it is a closed loop instead: N clients, each sending its
// next request when its last is answered (bench/budget.sh, run 5).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

func main() {
	base := flag.String("url", "http://127.0.0.1:8000", "the server's base URL (loopback only)")
	rate := flag.Int("rate", 100, "requests per second offered")
	duration := flag.Duration("duration", 10*time.Second, "how long to offer them")
	warmup := flag.Duration("warmup", 2*time.Second, "a run at the same rate before the measured one, not counted")
	pid := flag.Int("pid", 0, "the server's pid, for CPU per request and memory (0: not measured)")
	name := flag.String("name", "run", "a label for the output line")
	clients := flag.Int("clients", 0, "closed loop instead: this many clients, each sending its next request when its last is answered (-rate is then ignored)")
	flag.Parse()
	if !strings.HasPrefix(*base, "http://127.") && !strings.HasPrefix(*base, "http://localhost") && !strings.HasPrefix(*base, "http://[::1]") {
		fmt.Fprintln(os.Stderr, "loadgen: -url must be a loopback address")
		os.Exit(2)
	}
	url := strings.TrimRight(*base, "/") + "/feedback-sentiment"
	var seq atomic.Int64
	hdr := http.Header{"Content-Type": []string{"application/json"}}
	// Every text is different: no answer is reused, every request needs a
	// provider call (or a rejection).
	targeter := func(t *vegeta.Target) error {
		i := seq.Add(1)
		t.Method, t.URL, t.Header = http.MethodPost, url, hdr
		t.Body = []byte(`{"request_id":"r` + strconv.FormatInt(i, 10) + `","text":"review number ` + strconv.FormatInt(i, 10) + ` was fine"}`)
		return nil
	}
	// An attacker serves one attack: it stops at the end of it.
	newAttacker := func() *vegeta.Attacker {
		return vegeta.NewAttacker(
			vegeta.Workers(256), vegeta.MaxWorkers(4096), vegeta.Connections(4096),
			vegeta.Timeout(30*time.Second), vegeta.KeepAlive(true), vegeta.MaxBody(4096))
	}
	pacer := vegeta.Rate{Freq: *rate, Per: time.Second}
	attack := func(d time.Duration, name string) <-chan *vegeta.Result {
		if *clients > 0 {
			return closedLoop(targeter, *clients, d)
		}
		return newAttacker().Attack(vegeta.Targeter(targeter), pacer, d, name)
	}
	if *warmup > 0 {
		for range attack(*warmup, "warmup") {
		}
	}

	cpu0 := cpuTicks(*pid)
	var rss []int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if v := rssKiB(*pid); v > 0 {
					rss = append(rss, v)
				}
			case <-stopSampling:
				return
			}
		}
	}()

	var ok, rejected, other []time.Duration
	codes := map[string]int{}
	begin := time.Now()
	for r := range attack(*duration, *name) {
		switch {
		case r.Code == 200:
			ok = append(ok, r.Latency)
			codes["200"]++
		default:
			code := strconv.Itoa(int(r.Code))
			var e struct {
				Detail struct{ Code string } `json:"detail"`
			}
			if json.Unmarshal(r.Body, &e) == nil && e.Detail.Code != "" {
				code += " " + e.Detail.Code
			} else if r.Error != "" {
				code = "error " + r.Error
			}
			codes[code]++
			if strings.HasSuffix(code, "local_capacity") {
				rejected = append(rejected, r.Latency)
			} else {
				other = append(other, r.Latency)
			}
		}
	}
	elapsed := time.Since(begin)
	close(stopSampling)
	<-sampled
	cpu1 := cpuTicks(*pid)

	total := len(ok) + len(rejected) + len(other)
	offered := fmt.Sprintf("%d/s", *rate)
	if *clients > 0 {
		offered = fmt.Sprintf("%d clients in a closed loop", *clients)
	}
	fmt.Printf("%s: offered %s for %s: %d requests, answered 200: %d (%.0f/s)\n",
		*name, offered, *duration, total, len(ok), float64(len(ok))/elapsed.Seconds())
	fmt.Printf("  latency answered:  p50 %s  p99 %s  max %s\n", q(ok, 0.5), q(ok, 0.99), q(ok, 1))
	if len(rejected) > 0 {
		fmt.Printf("  latency rejected (503 local_capacity, %d): p50 %s  p99 %s  max %s\n", len(rejected), q(rejected, 0.5), q(rejected, 0.99), q(rejected, 1))
	}
	if len(other) > 0 {
		fmt.Printf("  latency other (%d): p50 %s  p99 %s\n", len(other), q(other, 0.5), q(other, 0.99))
	}
	keys := make([]string, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, codes[k])
	}
	fmt.Printf("  answers: %s\n", strings.Join(parts, "  "))
	if *pid > 0 && total > 0 && cpu0 >= 0 && cpu1 >= 0 {
		secs := float64(cpu1-cpu0) / 100 // USER_HZ is 100 on Linux
		fmt.Printf("  server CPU: %.2fs for %d requests = %.3f ms/request (%.0f%% of one core)\n",
			secs, total, 1000*secs/float64(total), 100*secs/elapsed.Seconds())
	}
	if len(rss) > 0 {
		var every []string
		for i := 4; i < len(rss); i += 5 {
			every = append(every, fmt.Sprintf("%.1f", mib(rss[i])))
		}
		fmt.Printf("  server RSS (MiB): after 1s %.1f, then every 5s: %s; max %.1f\n",
			mib(rss[0]), strings.Join(every, " "), mib(slices.Max(rss)))
	}
}

// q is the n-th quantile of ds (sorted in place), rounded for reading.
func q(ds []time.Duration, n float64) string {
	if len(ds) == 0 {
		return "-"
	}
	slices.Sort(ds)
	i := int(n * float64(len(ds)-1))
	return ds[i].Round(100 * time.Microsecond).String()
}

func mib(kib int64) float64 { return float64(kib) / 1024 }

// cpuTicks is the process's user+system CPU time in clock ticks, -1 if
// unknown.
func cpuTicks(pid int) int64 {
	if pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: utime and stime are the 14th and 15th fields.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return -1
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// rssKiB is the process's resident set size in KiB, 0 if unknown.
func rssKiB(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// closedLoop is n clients, each sending its next request as soon as its
// last one is answered, for d: the traffic of callers that wait for their
// answer (a server's demand is then n calls in flight).
func closedLoop(targeter func(*vegeta.Target) error, n int, d time.Duration) <-chan *vegeta.Result {
	out := make(chan *vegeta.Result, 1024)
	cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				var t vegeta.Target
				_ = targeter(&t)
				req, _ := http.NewRequest(t.Method, t.URL, bytes.NewReader(t.Body))
				req.Header = t.Header
				start := time.Now()
				r := &vegeta.Result{Timestamp: start}
				resp, err := cl.Do(req)
				if err != nil {
					r.Error = err.Error()
				} else {
					r.Code = uint16(resp.StatusCode)
					r.Body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
					resp.Body.Close()
				}
				r.Latency = time.Since(start)
				out <- r
			}
		}()
	}
	go func() { wg.Wait(); close(out) }()
	return out
}
