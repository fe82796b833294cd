// Command peerserve is the floor `hfsent serve` is compared with in
// bench/serve.sh: the plainest correct Go service of the same route (net/http
// server, one shared net/http client, a slot channel of -c with a 35 ms
// admission wait, encoding/json both ways), with no retries, breaker,
// metrics, access log or validation beyond the JSON. Its CPU per request,
// measured in the same sitting with the same load, says how much of
// hfsent's cost is net/http and the machine, and how much is hfsent.
//
//	peerserve -upstream http://127.0.0.1:PORT -c 64
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	upstream := flag.String("upstream", "", "the fake provider's base URL (loopback only)")
	conc := flag.Int("c", 64, "provider calls in flight")
	wait := flag.Duration("admission-wait", 35*time.Millisecond, "how long a request may wait for a slot")
	flag.Parse()
	if *upstream == "" || *conc < 1 || *conc > 4096 {
		fmt.Fprintln(os.Stderr, "usage: peerserve -upstream URL [-c N]")
		os.Exit(2)
	}
	client := &http.Client{Transport: &http.Transport{
		MaxConnsPerHost: *conc, MaxIdleConnsPerHost: *conc, MaxIdleConns: *conc,
	}, Timeout: 15 * time.Second}
	slots := make(chan struct{}, *conc)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /feedback-sentiment", func(w http.ResponseWriter, r *http.Request) {
		var in struct {
			RequestID string `json:"request_id"`
			Text      string `json:"text"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil || in.RequestID == "" || in.Text == "" {
			http.Error(w, `{"detail":{"code":"invalid_input"}}`, http.StatusUnprocessableEntity)
			return
		}
		t := time.NewTimer(*wait)
		select {
		case slots <- struct{}{}:
			t.Stop()
		case <-t.C:
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"detail":{"code":"local_capacity"}}`, http.StatusServiceUnavailable)
			return
		}
		defer func() { <-slots }()
		body, _ := json.Marshal(map[string]string{"inputs": in.Text})
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, *upstream, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, `{"detail":{"code":"upstream_failed"}}`, http.StatusBadGateway)
			return
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		var ans [][]struct {
			Label string  `json:"label"`
			Score float64 `json:"score"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(b, &ans) != nil || len(ans) == 0 || len(ans[0]) == 0 {
			http.Error(w, `{"detail":{"code":"upstream_failed"}}`, http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"request_id": in.RequestID, "label": ans[0][0].Label, "score": ans[0][0].Score, "model": "peer"})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The same line hfsent serve logs, so bench/serve.sh finds the port.
	fmt.Fprintf(os.Stderr, "msg=listening addr=%s\n", ln.Addr())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	_ = srv.Serve(ln)
}
