package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// A provider that refuses by a token limit it sends no header for: the
// guard learns the rate from its 429s, and the end says what it learnt,
// on the summary line and in --summary-json.
func TestLearntRateInSummary(t *testing.T) {
	if testing.Short() {
		t.Skip("a storm of a few seconds")
	}
	const rate = 6000.0 // tokens a second
	f := &fakehf.Chat{Latency: 20 * time.Millisecond, Bucket: fakehf.Bucket{Rate: rate, Burst: rate},
		NoLimitHeaders: true, RetryAfterMs: true}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i := range 160 {
		b.WriteString("r" + itoa(i) + ",review " + itoa(i) + ": " + strings.Repeat("the service was fine and quick ", 9) + "\n")
	}
	in := writeFile(t, "in.csv", b.String())
	out, sum := filepath.Join(t.TempDir(), "out.csv"), filepath.Join(t.TempDir(), "sum.json")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_test"}, "",
		append([]string{"classify", in, "-o", out, "--summary-json", sum, "--no-progress", "-c", "16"}, chatArgs(srv.URL)...)...)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if f.Rejected() == 0 {
		t.Fatal("the fake refused nothing: nothing to learn from")
	}
	var js struct {
		Resilience map[string]float64 `json:"resilience"`
	}
	data, _ := os.ReadFile(sum)
	if err := json.Unmarshal(data, &js); err != nil {
		t.Fatal(err)
	}
	got := js.Resilience["learnt_tokens_per_minute"]
	t.Logf("%d calls, %d 429s; learnt %.0f tokens/min, the provider's %.0f", f.Calls(), f.Rejected(), got, rate*60)
	// The rate paces the calls near the provider's: within a factor of 3
	// either way (it probes past the edge, and a cut takes 0.8 of it).
	if got < rate*60/3 || got > rate*60*3 {
		t.Fatalf("learnt_tokens_per_minute %v, want near %v\n%s", got, rate*60, data)
	}
	if !strings.Contains(r.stderr, "learnt_tokens_per_minute=") {
		t.Fatalf("summary line lacks the learnt rate:\n%s", r.stderr)
	}
}

// With no refusal, nothing is learnt: 0 in the JSON, nothing on the line.
func TestNoLearntRateWithoutRefusals(t *testing.T) {
	f := &fakehf.Chat{NoLimitHeaders: true}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a", "b", "c"))
	out, sum := filepath.Join(t.TempDir(), "out.csv"), filepath.Join(t.TempDir(), "sum.json")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_test"}, "",
		append([]string{"classify", in, "-o", out, "--summary-json", sum, "--no-progress"}, chatArgs(srv.URL)...)...)
	if r.code != ExitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	data, _ := os.ReadFile(sum)
	if !strings.Contains(string(data), `"learnt_tokens_per_minute": 0`) || strings.Contains(r.stderr, "learnt_tokens_per_minute") {
		t.Fatalf("summary: %s\n%s", data, r.stderr)
	}
}
