package resilience

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/provider"
)

// stormResult is what a storm run saw: rows that did not succeed, the
// fake's calls and 429s, and the wall time over the ideal (the tokens the
// provider accepted, over its rate).
type stormResult struct {
	failed        int
	calls, r429   int64
	wall, ideal   time.Duration
	share, ratio  float64
	firstFailures []string
}

func (s stormResult) String() string {
	return fmt.Sprintf("%d rows failed, %d calls, %d 429s (%.1f%%), wall %s, ideal %s (%.2f×)",
		s.failed, s.calls, s.r429, 100*s.share, s.wall.Round(time.Millisecond), s.ideal.Round(time.Millisecond), s.ratio)
}

// storm sends rows texts of about 90 tokens, c at a time, through a guard
// built from cfg (the CLI's defaults for a chat provider) against f.
func storm(t *testing.T, f *fakehf.Chat, cfg Config, rows, c int) stormResult {
	t.Helper()
	srv := fakehf.StartChat(f)
	t.Cleanup(srv.Close)
	client, err := provider.NewChat(provider.ChatConfig{Model: "m", Endpoint: srv.URL + "/v1/chat/completions",
		Labels: []string{"positive", "negative"}, Concurrency: c, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Concurrency = c
	g := Build(client, cfg)
	var failed atomic.Int64
	var mu sync.Mutex
	var first []string
	var wg sync.WaitGroup
	start := time.Now()
	for i := range rows {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			text := fmt.Sprintf("review %d: %s", i, strings.Repeat("the service was fine and quick ", 9))
			if _, err := g.Classify(ctx, &Row{}, []string{text}); err != nil {
				failed.Add(1)
				mu.Lock()
				if len(first) < 3 {
					first = append(first, err.Error())
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res := stormResult{failed: int(failed.Load()), calls: f.Calls(), r429: f.Rejected(), wall: time.Since(start), firstFailures: first}
	if f.Bucket.Rate > 0 {
		res.ideal = time.Duration(float64(f.Tokens()) / f.Bucket.Rate * float64(time.Second))
	}
	res.share = float64(res.r429) / float64(max(res.calls, 1))
	return res
}

// chatDefaults are the policies classify gives a chat provider by default.
func chatDefaults() Config {
	return Config{Retries: 4, PaceByHeaders: true, RateLimitWait: 2 * time.Minute, MaxRetryAfter: 10 * time.Minute}
}

// stormForms are the two providers of issue 25 whose limits cannot be
// read, holding rate tokens a second over a second: one whose headers
// describe a minute's bucket with room in it while the second's window
// refuses, and one with no rate-limit header at all; both answer a 429
// with a retry-after-ms of a few ms.
func stormForms(rate float64) map[string]func() *fakehf.Chat {
	return map[string]func() *fakehf.Chat{
		"minute headers, hidden second": func() *fakehf.Chat {
			return &fakehf.Chat{Latency: 20 * time.Millisecond, Bucket: fakehf.Bucket{Rate: rate, Burst: 60 * rate}, Window: time.Second, RetryAfterMs: true, NoRecord: true}
		},
		"no headers": func() *fakehf.Chat {
			return &fakehf.Chat{Latency: 20 * time.Millisecond, Bucket: fakehf.Bucket{Rate: rate, Burst: rate}, NoLimitHeaders: true, RetryAfterMs: true, NoRecord: true}
		},
	}
}

// A provider that keeps answering 429 with retry-after-ms: 10 for 600 ms:
// each pause that did not help is followed by one twice as long, so the
// rows neither spend their retries within milliseconds nor hammer it a
// call every 10 ms, and every row succeeds once it lets calls through.
func TestRepeated429sLengthenThePause(t *testing.T) {
	const window = 600 * time.Millisecond
	f := &fakehf.Chat{RefuseFor: window, RetryAfterMs: true}
	cfg := chatDefaults()
	cfg.Concurrency = 4
	g := Build(startChat(t, f), cfg)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			if _, _, err := chatRow(g, "a review of the service"); err != nil {
				errs <- err
			}
		})
	}
	var longest time.Duration
	for start := time.Now(); time.Since(start) < window; time.Sleep(2 * time.Millisecond) {
		longest = max(longest, g.Cooldown())
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a row failed: %v", err)
	}
	// A pause of 10 ms repeated would let about 4 calls through every
	// 10 ms: some 240 in the window. Doubling from 10 ms, it is a few
	// rounds of at most 4.
	t.Logf("%d calls, %d refused, longest pause seen %s", f.Calls(), f.Rejected(), longest)
	if r := f.Rejected(); r > 40 {
		t.Errorf("%d calls refused in %s of 429s asking for 10 ms, want at most 40", r, window)
	}
	if longest < 100*time.Millisecond {
		t.Errorf("the longest shared pause was %s, want the 10 ms doubled to at least 100 ms", longest)
	}
}

// A provider whose headers tell the truth stays paced by them alone at
// -c 32, as before the learnt pace: no refusal (the first call goes alone
// until it is answered, then the headers hold the others back), and
// nothing is learnt. The bucket holds less than a first burst of 32
// calls would spend.
func TestHonestHeadersStayUnrefused(t *testing.T) {
	const rate = 3000
	f := &fakehf.Chat{Latency: 20 * time.Millisecond, Bucket: fakehf.Bucket{Rate: rate, Burst: rate}, NoRecord: true}
	res := storm(t, f, chatDefaults(), 80, 32)
	t.Logf("%s", res)
	if res.failed > 0 || res.r429 > 0 {
		t.Errorf("honest headers: %d rows failed, %d of %d calls refused; want none", res.failed, res.r429, res.calls)
	}
}
