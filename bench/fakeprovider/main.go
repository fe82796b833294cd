// Command fakeprovider serves the fake Hugging Face API (internal/fakehf) on
// loopback for the benchmark scripts: a fixed latency, an optional capacity
// beyond which calls get 429, a share of random 503s, an outage window, a
// model that is loading for a while, and poison texts.
//
// Poison texts carry a marker anywhere in the text: "#timeout#" is never
// answered (the call hangs until the client gives up), "#500#" is always
// answered 500, "#400#" always 400.
//
// It also serves the endpoints of today as bench/endpoints.sh replays them:
// -tei emulates text-embeddings-inference's /predict (fakehf.TEI), -replay
// NAME answers every call with a recording of internal/fakehf/replays (its
// exchanges in turn, then the last again), and -scale-to-zero DUR puts the
// proxy of an Inference Endpoint scaled to zero in front (fakehf.ScaledToZero).
//
// -batch serves OpenAI's Batch API instead (fakehf.Batch, bench/batch_api.sh):
// uploads, batches and their output and error files under /v1, each request
// line answered as -chat answers it. A batch moves validating -> in_progress
// -> finalizing -> completed, -batch-steps steps in each; a step is a poll of
// that batch, or with -batch-step-time that much time from its creation (then
// polls do not move it, and the summary's processing_ms is the fake's own
// processing time to set the client's wall time against). -batch-expire-after,
// -batch-cancel-after, -batch-token-limit, -batch-max-requests and
// -batch-max-bytes are the provider's refusals and partial ends. On SIGTERM it
// prints uploads, creates, polls, downloads, cancels, live calls, lines
// answered, the peak of enqueued tokens, the batches by status and
// processing_ms.
package main

import (
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	latency := flag.Duration("latency", 20*time.Millisecond, "time every call takes")
	capacity := flag.Int("capacity", 0, "calls in flight beyond which the answer is 429 (0: no limit)")
	retryAfter := flag.String("retry-after", "1", "Retry-After value sent with 429s (empty: none)")
	rejectFast := flag.Bool("reject-fast", false, "answer 429s at once instead of after -latency (a rate limiter at the door)")
	fail := flag.Float64("fail", 0, "share of calls answered 503 (0..1)")
	outageAfter := flag.Duration("outage-after", 0, "start of an outage, from the first call (with -outage-for)")
	outageFor := flag.Duration("outage-for", 0, "length of the outage: every call is answered 500")
	loadingFor := flag.Duration("loading-for", 0, "the model is loading for this long from the first call: 503 with estimated_time, or, with X-Wait-For-Model: 1, the call is held until it is up")
	estimate := flag.Float64("estimated-time", 20, "estimated_time (seconds) in the loading 503")
	flat := flag.Bool("flat", false, "answer [{label,score}] rather than the nested form")
	addrFile := flag.String("addr-file", "", "write the bound address to this file once listening")
	tei := flag.Bool("tei", false, "emulate text-embeddings-inference's /predict instead")
	replay := flag.String("replay", "", "answer every call with this recording of internal/fakehf/replays")
	replayThenOK := flag.Bool("replay-then-ok", false, "with -replay: its exchanges once each, then normal answers")
	scaleToZero := flag.Duration("scale-to-zero", 0, "a replica starts this long after the first call; before, 503 (or held with X-Scale-Up-Timeout)")
	rateWindow := flag.Duration("ratelimit-window", 0, "every call this long from the first gets 429 with the Hub's RateLimit header (r=0;t=seconds left), no Retry-After")
	bare429 := flag.Duration("bare-429-for", 0, "every call this long from the first gets 429 with no Retry-After nor RateLimit header")
	maxWords := flag.Int("max-words", 0, "a text of more words than this gets the inference toolkit's 400 (a tensor size mismatch) unless parameters.truncation is true (0: no limit)")
	chat := flag.Bool("chat", false, "serve an OpenAI-compatible /v1/chat/completions instead (fakehf.Chat)")
	chatRate := flag.Float64("chat-rate", 0, "with -chat: a token bucket refilling this many tokens a second (0: no limit)")
	chatBurst := flag.Float64("chat-burst", 0, "with -chat: the bucket's size in tokens (default: one second's worth)")
	chatNoHeaders := flag.Bool("chat-headers-on-429-only", false, "with -chat: send the x-ratelimit headers with 429s only")
	chatWindow := flag.Duration("chat-window", 0, "with -chat: also hold the rate over this shorter window, which the headers never show (at most rate×window tokens in any window)")
	chatNoLimitHeaders := flag.Bool("chat-no-limit-headers", false, "with -chat: send no x-ratelimit header at all")
	chatRetryAfterMs := flag.Bool("chat-retry-after-ms", false, "with -chat: send retry-after-ms with a 429 (the time until the call's tokens are there)")
	chatCacheMin := flag.Int("chat-cache-min", 0, "with -chat: a prompt cache as OpenAI's: a call repeating a system message of this many tokens or more reports them (in steps of 128) as usage.prompt_tokens_details.cached_tokens (0: none)")
	chatOracle := flag.String("chat-oracle", "", "with -chat: a CSV with text and gold columns; a text found there is answered its gold label, whatever the prompt says (an oracle: it reads neither labels nor descriptions)")
	chatGold := flag.String("chat-gold", "", "with -chat: answer the texts of this CSV (text and gold columns) as a model right -chat-gold-p of the time, deterministic per text, with informative logprobs (fakehf.Gold)")
	chatGoldP := flag.Float64("chat-gold-p", 0.93, "with -chat-gold: the share of texts answered their gold label")
	chatGoldText := flag.String("chat-gold-text-column", "text", "with -chat-gold: the text column")
	chatGoldColumn := flag.String("chat-gold-column", "gold", "with -chat-gold: the gold label column")
	batchOpts := addBatchFlags()
	flag.Parse()
	var gold *fakehf.Gold
	if *chatGold != "" {
		f, err := os.Open(*chatGold)
		if err != nil {
			log.Fatal(err)
		}
		gold, err = fakehf.ReadGold(f, *chatGoldText, *chatGoldColumn, *chatGoldP)
		f.Close()
		if err != nil {
			log.Fatal(err)
		}
	}

	var rejected, failed, outage, poisoned, loading atomic.Int64
	var firstOnce sync.Once
	var first time.Time
	start := func() time.Time { firstOnce.Do(func() { first = time.Now() }); return first }
	// It never reports what it was sent, so it keeps nothing per call: its
	// memory stays flat over a million-row benchmark.
	f := &fakehf.Fake{Latency: *latency, Flat: *flat, NoRecord: true}
	f.Script = func(n int64, texts []string, r *http.Request) fakehf.Reply {
		t0 := start()
		if *rateWindow > 0 {
			if left := *rateWindow - time.Since(t0); left > 0 {
				rejected.Add(1)
				return fakehf.Reply{Status: 429, Immediate: true, Header: map[string]string{
					"RateLimit": fmt.Sprintf(`"api";r=0;t=%d`, int(left.Seconds()+0.999)), "RateLimit-Policy": fmt.Sprintf(`"fixed window";"api";q=500;w=%d`, int(rateWindow.Seconds()))}}
			}
		}
		if *bare429 > 0 && time.Since(t0) < *bare429 {
			rejected.Add(1)
			return fakehf.Reply{Status: 429, Immediate: true}
		}
		if *maxWords > 0 && !truncates(r) {
			for _, t := range texts {
				if w := len(strings.Fields(t)); w > *maxWords {
					poisoned.Add(1)
					return fakehf.Reply{Status: 400, Body: fmt.Sprintf(`{"error":"The size of tensor a (%d) must match the size of tensor b (%d) at non-singleton dimension 1"}`, w+2, *maxWords)}
				}
			}
		}
		for _, t := range texts {
			switch {
			case strings.Contains(t, "#timeout#"):
				poisoned.Add(1)
				return fakehf.Reply{Delay: time.Hour}
			case strings.Contains(t, "#500#"):
				poisoned.Add(1)
				return fakehf.Reply{Status: 500}
			case strings.Contains(t, "#400#"):
				poisoned.Add(1)
				return fakehf.Reply{Status: 400}
			}
		}
		if *loadingFor > 0 {
			if left := *loadingFor - time.Since(t0); left > 0 {
				loading.Add(1)
				if r.Header.Get("X-Wait-For-Model") != "" {
					return fakehf.Reply{Delay: left} // held until the model is up
				}
				return fakehf.Reply{Status: 503, Body: fmt.Sprintf(`{"error":"Model %s is currently loading","estimated_time":%.1f}`, "fake/model", *estimate)}
			}
		}
		if *outageFor > 0 {
			if since := time.Since(t0); since >= *outageAfter && since < *outageAfter+*outageFor {
				outage.Add(1)
				return fakehf.Reply{Status: 500}
			}
		}
		if *fail > 0 && rand.Float64() < *fail {
			failed.Add(1)
			return fakehf.Reply{Status: 503}
		}
		if *capacity > 0 {
			// Counted across the whole call, as a provider counts the
			// requests it holds.
			if f.InFlight() > int64(*capacity) {
				rejected.Add(1)
				rep := fakehf.Reply{Status: 429, Immediate: *rejectFast}
				if *retryAfter != "" {
					rep.Header = map[string]string{"Retry-After": *retryAfter}
				}
				return rep
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
	var h http.Handler = fakehf.Handler(f)
	calls := f.Calls
	switch {
	case *tei:
		t := &fakehf.TEI{Latency: *latency}
		h, calls = t, t.Calls
	case *replay != "":
		rec := fakehf.Load(*replay)
		next, normal := rec.Script(), f.Script
		f.Script = func(n int64, texts []string, r *http.Request) fakehf.Reply {
			if *replayThenOK && n > int64(len(rec.Exchanges)) {
				return normal(n, texts, r)
			}
			return next(n, texts, r)
		}
	}
	var chatFake *fakehf.Chat
	if *chat {
		burst := *chatBurst
		if burst <= 0 {
			burst = *chatRate
		}
		chatFake = &fakehf.Chat{Latency: *latency, NoRecord: true, Bucket: fakehf.Bucket{Rate: *chatRate, Burst: burst}, HeadersOn429Only: *chatNoHeaders,
			Window: *chatWindow, NoLimitHeaders: *chatNoLimitHeaders, RetryAfterMs: *chatRetryAfterMs, CacheMin: *chatCacheMin, Gold: gold}
		if *chatOracle != "" {
			chatFake.Answer = oracle(*chatOracle)
		}
		h, calls = chatFake, chatFake.Calls
	}
	var batchFake *fakehf.Batch
	if *batchOpts.on {
		if chatFake == nil {
			chatFake = &fakehf.Chat{Latency: *latency, NoRecord: true}
		}
		batchFake = batchOpts.fake(chatFake)
		h, calls = batchFake.Handler(), chatFake.Calls
		defer batchFake.Close()
	}
	var proxy *fakehf.ScaledToZero
	if *scaleToZero > 0 {
		proxy = &fakehf.ScaledToZero{Inner: h, StartUp: *scaleToZero}
		h = proxy
	}
	// The mean of calls in flight over the run (bench/budget.sh): the time
	// every call was held, summed, over the time from the first call's
	// start to the last one's end (Little's law).
	var busy, firstStart, lastEnd atomic.Int64
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now().UnixNano()
		firstStart.CompareAndSwap(0, t0)
		inner.ServeHTTP(w, r)
		t1 := time.Now().UnixNano()
		busy.Add(t1 - t0)
		for cur := lastEnd.Load(); t1 > cur && !lastEnd.CompareAndSwap(cur, t1); cur = lastEnd.Load() {
		}
	})
	meanInFlight := func() float64 {
		if span := lastEnd.Load() - firstStart.Load(); span > 0 {
			return float64(busy.Load()) / float64(span)
		}
		return 0
	}
	srv := &http.Server{Handler: h}
	// SIGUSR1 marks a point of the run: the mean in flight between two
	// marks is their busy_ns apart over their now_ns apart (calls are
	// counted as they end, so a call across a mark counts on one side).
	go func() {
		usr := make(chan os.Signal, 1)
		signal.Notify(usr, syscall.SIGUSR1)
		for range usr {
			fmt.Fprintf(os.Stderr, "fakeprovider: mark busy_ns=%d now_ns=%d calls=%d max_in_flight=%d\n", busy.Load(), time.Now().UnixNano(), calls(), f.MaxInFlight())
		}
	}()
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
		<-sig
		if proxy != nil {
			fmt.Fprintf(os.Stderr, "fakeprovider: proxy calls=%d refused_503=%d held=%d\n", proxy.Calls(), proxy.Refused(), proxy.Held())
		}
		if chatFake != nil {
			fmt.Fprintf(os.Stderr, "fakeprovider: chat calls=%d 429=%d tokens_accepted=%d\n", chatFake.Calls(), chatFake.Rejected(), chatFake.Tokens())
		}
		if batchFake != nil {
			reportBatch(os.Stderr, batchFake)
		}
		fmt.Fprintf(os.Stderr, "fakeprovider: calls=%d max_in_flight=%d mean_in_flight=%.2f 429=%d 503=%d outage_500=%d poison=%d loading=%d\n",
			calls(), f.MaxInFlight(), meanInFlight(), rejected.Load(), failed.Load(), outage.Load(), poisoned.Load(), loading.Load())
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// truncates reports whether a call asked for truncation, as transformers'
// pipeline reads it: "parameters": {"truncation": true}.
func truncates(r *http.Request) bool {
	var req struct {
		Parameters struct {
			Truncation bool `json:"truncation"`
		} `json:"parameters"`
	}
	return json.Unmarshal(fakehf.Body(r), &req) == nil && req.Parameters.Truncation
}

// oracle answers a text its gold label from a CSV with text and gold
// columns, and any other text as the fake model does.
func oracle(path string) func(string) string {
	f, err := os.Open(path)
	if err != nil {
		log.Fatalf("-chat-oracle: %v", err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) == 0 {
		log.Fatalf("-chat-oracle %s: not a CSV with a header: %v", path, err)
	}
	text, gold := slices.Index(rows[0], "text"), slices.Index(rows[0], "gold")
	if text < 0 || gold < 0 {
		log.Fatalf("-chat-oracle %s: no text or gold column", path)
	}
	answers := make(map[string]string, len(rows))
	for _, r := range rows[1:] {
		if len(r) > max(text, gold) {
			answers[r[text]] = r[gold]
		}
	}
	return func(t string) string {
		if g, ok := answers[t]; ok {
			return g
		}
		l, _ := fakehf.Label(t)
		return l
	}
}
