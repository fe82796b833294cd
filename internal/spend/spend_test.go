package spend

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/hfsent/hfsent/internal/provider"
)

// liteLLM is an excerpt in the shape of LiteLLM's
// model_prices_and_context_window.json: its sample_spec, a chat model
// with batch prices, one without, an embedding model (no output price),
// an image model (no token price), and a cost written as a string.
const liteLLM = `{
  "sample_spec": {
    "max_tokens": "LEGACY parameter. set to max_output_tokens if provider specifies it.",
    "input_cost_per_token": 0.0000,
    "output_cost_per_token": 0.000,
    "litellm_provider": "one of https://docs.litellm.ai/docs/providers",
    "mode": "one of: chat, embedding, completion, image_generation"
  },
  "gpt-4o-mini": {
    "max_tokens": 16384, "max_input_tokens": 128000, "max_output_tokens": 16384,
    "input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07,
    "input_cost_per_token_batches": 7.5e-08, "output_cost_per_token_batches": 3e-07,
    "cache_read_input_token_cost": 7.5e-08,
    "litellm_provider": "openai", "mode": "chat", "supports_function_calling": true
  },
  "meta-llama/Llama-3.1-8B-Instruct": {
    "input_cost_per_token": 1e-07, "output_cost_per_token": "2e-07", "litellm_provider": "huggingface", "mode": "chat"
  },
  "text-embedding-3-small": {"input_cost_per_token": 2e-08, "output_cost_per_token": 0.0, "mode": "embedding"},
  "dall-e-3": {"input_cost_per_pixel": 1e-07, "output_cost_per_pixel": 0.0, "mode": "image_generation"}
}`

func TestParseLiteLLM(t *testing.T) {
	ps, err := Parse(strings.NewReader(liteLLM))
	if err != nil {
		t.Fatal(err)
	}
	if ps.Len() != 3 {
		t.Errorf("priced %d models, want 3 (gpt-4o-mini, Llama, the embedding; not sample_spec nor dall-e-3)", ps.Len())
	}
	u := provider.Usage{Prompt: 1000, Completion: 10, Known: true}
	p, ok := ps.For("gpt-4o-mini")
	if !ok || !p.Batch {
		t.Fatalf("gpt-4o-mini: %+v %v", p, ok)
	}
	if c, _ := p.Cost(u, false, 0); !near(c, 1000*1.5e-7+10*6e-7) {
		t.Errorf("live cost %g", c)
	}
	if c, _ := p.Cost(u, true, 0.9); !near(c, 1000*7.5e-8+10*3e-7) {
		t.Errorf("batch cost %g: the list's batch prices, not the discount", c)
	}
	// The router's ":provider" suffix is looked up without it; nothing
	// else is guessed.
	if p, ok := ps.For("meta-llama/Llama-3.1-8B-Instruct:cerebras"); !ok || p.Out != 2e-7 {
		t.Errorf("suffix lookup: %+v %v", p, ok)
	}
	for _, m := range []string{"gpt-4o", "openai/gpt-4o-mini", "GPT-4O-MINI", "dall-e-3", "sample_spec"} {
		if _, ok := ps.For(m); ok {
			t.Errorf("%s priced: a price not in the file is unknown, never guessed", m)
		}
	}
	// A model with no batch price, through a Batch API: the discount.
	p, _ = ps.For("meta-llama/Llama-3.1-8B-Instruct")
	if c, _ := p.Cost(u, true, 0.5); !near(c, 0.5*(1000*1e-7+10*2e-7)) {
		t.Errorf("discounted batch cost %g", c)
	}
	if _, ok := p.Cost(provider.Usage{}, false, 0); ok {
		t.Error("a call with no usage has a cost")
	}
}

func TestParseRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"not json":       `{"a": `,
		"an array":       `[]`,
		"two values":     `{} {}`,
		"entry a string": `{"m": "cheap"}`,
		"negative":       `{"m": {"input_cost_per_token": -1e-6, "output_cost_per_token": 0}}`,
		"not a number":   `{"m": {"input_cost_per_token": "free", "output_cost_per_token": 0}}`,
		"a bool":         `{"m": {"input_cost_per_token": true}}`,
		"huge":           `{"m": {"input_cost_per_token": 1e400}}`,
	} {
		if _, err := Parse(strings.NewReader(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		} else if name == "negative" && !strings.Contains(err.Error(), `"m"`) {
			t.Errorf("%s: %v does not name the model", name, err)
		}
	}
}

func TestLedgerCharges(t *testing.T) {
	l := NewLedger(Flat(1, 2), 0) // $1 and $2 per million
	if usd, ok := l.Charge("any", provider.Usage{Prompt: 1e6, Completion: 5e5, Known: true}, false); !ok || !near(usd, 2) {
		t.Errorf("charge %g %v", usd, ok)
	}
	// The server's own figure wins.
	if usd, _ := l.Charge("any", provider.Usage{Prompt: 1e6, Known: true, Cost: 0.25, Costed: true}, false); usd != 0.25 {
		t.Errorf("reported cost not used: %g", usd)
	}
	if _, ok := l.Charge("any", provider.Usage{}, false); ok {
		t.Error("no usage priced")
	}
	tot := l.Totals()
	if !near(tot.Spent, 2.25) || tot.Calls != 2 || tot.Unpriced != 1 || !tot.Priced {
		t.Errorf("totals %+v", tot)
	}
	// No prices: blank, unless the server says.
	var none Ledger
	if _, ok := none.Charge("m", provider.Usage{Prompt: 10, Known: true}, false); ok || none.Totals().Priced {
		t.Error("a cost without prices")
	}
}

// TestLedgerLimit: a reservation that would pass the limit is refused,
// and every one after it, while the spend plus what is in flight never
// passes the limit by more than the estimates' error.
func TestLedgerLimit(t *testing.T) {
	l := NewLedger(Flat(1e6, 0), 10) // $1 a prompt token
	stops := 0
	l.OnLimit(func() { stops++ })
	var held []*Reservation
	for range 4 {
		r, ok := l.Reserve(2)
		if !ok {
			t.Fatal("refused under the limit")
		}
		held = append(held, r)
	}
	if _, ok := l.Reserve(3); ok {
		t.Fatal("8 in flight + 3 > 10 granted")
	}
	// Settling below the estimate frees room, but sending has stopped.
	held[0].Settle("m", provider.Usage{Prompt: 1, Known: true})
	if _, ok := l.Reserve(0.5); ok || stops != 1 {
		t.Errorf("granted after the stop, or hooks called %d times", stops)
	}
	for _, r := range held[1:] {
		r.Settle("m", provider.Usage{Prompt: 2, Known: true})
		r.Settle("m", provider.Usage{Prompt: 2, Known: true}) // once only
	}
	if tot := l.Totals(); !near(tot.Spent, 7) || tot.Reserved != 0 || tot.InFlight != 0 || !tot.Stopped {
		t.Errorf("totals %+v", tot)
	}
}

func TestLedgerFleet(t *testing.T) {
	l := NewLedger(Flat(1e6, 0), 0)
	l.SetFleet(10, 9)
	if _, ok := l.Reserve(0.5); !ok {
		t.Fatal("9 + 0.5 <= 10 refused")
	}
	if _, ok := l.Reserve(0.6); ok {
		t.Fatal("9 + 0.5 + 0.6 > 10 granted")
	}
}

func TestLedgerConcurrent(t *testing.T) {
	l := NewLedger(Flat(1e6, 0), 50)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				r, ok := l.Reserve(1)
				if !ok {
					return
				}
				r.Settle("m", provider.Usage{Prompt: 1, Known: true})
			}
		})
	}
	wg.Wait()
	if tot := l.Totals(); tot.Spent > 50 || tot.Spent < 49 {
		t.Errorf("spent %g against a limit of 50 with exact estimates", tot.Spent)
	}
}

// FuzzParse: whatever the bytes, Parse never panics, and every price it
// accepts is finite and not negative.
func FuzzParse(f *testing.F) {
	f.Add([]byte(liteLLM))
	f.Add([]byte(`{"m": {"input_cost_per_token": "1e-6", "output_cost_per_token": null}}`))
	f.Add([]byte(`{"m": {"output_cost_per_token_batches": 1}}`))
	f.Add([]byte(`{"": {}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := Parse(bytes.NewReader(b))
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		for m, p := range ps.table {
			for _, v := range []float64{p.In, p.Out, p.InBatch, p.OutBatch} {
				if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("%q priced %+v", m, p)
				}
			}
		}
	})
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

// Cached prompt tokens are part of the prompt's: each priced once, at
// the cached rate when it is known (LiteLLM's cache_read_input_token_cost,
// --price-cached-in), else at the prompt's rate.
func TestCachedTokensPricedOnceAtTheirRate(t *testing.T) {
	ps, err := Parse(strings.NewReader(liteLLM))
	if err != nil {
		t.Fatal(err)
	}
	u := provider.Usage{Prompt: 2000, Completion: 10, Cached: 1920, Known: true}
	l := NewLedger(ps, 0)
	// gpt-4o-mini: 80 × 0.15/M + 1920 × 0.075/M + 10 × 0.6/M.
	want := 80*1.5e-7 + 1920*7.5e-8 + 10*6e-7
	if got, ok := l.Cost("gpt-4o-mini", u, false); !ok || math.Abs(got-want) > 1e-15 {
		t.Errorf("gpt-4o-mini: %v, want %v", got, want)
	}
	// Without a cached rate, the prompt's: 2000 × 0.1/M + 10 × 0.2/M.
	if got, _ := l.Cost("meta-llama/Llama-3.1-8B-Instruct", u, false); math.Abs(got-(2000*1e-7+10*2e-7)) > 1e-15 {
		t.Errorf("no cached rate: %v", got)
	}
	// Through the Batch API, the batch's half of the cached rate.
	wantBatch := 80*7.5e-8 + 1920*3.75e-8 + 10*3e-7
	if got, _ := l.Cost("gpt-4o-mini", u, true); math.Abs(got-wantBatch) > 1e-15 {
		t.Errorf("batch: %v, want %v", got, wantBatch)
	}
	if got, _ := NewLedger(ps.AtBatch(), 0).Cost("gpt-4o-mini", u, false); math.Abs(got-wantBatch) > 1e-15 {
		t.Errorf("AtBatch: %v, want %v", got, wantBatch)
	}
	// Flat prices with --price-cached-in.
	flat := Flat(0.15, 0.6).WithCachedIn(0.075)
	if got, _ := NewLedger(flat, 0).Cost("any", u, false); math.Abs(got-want) > 1e-15 {
		t.Errorf("flat: %v, want %v", got, want)
	}
	// A count over the prompt is the prompt: never a negative share.
	over := u
	over.Cached = 5000
	if got, _ := NewLedger(flat, 0).Cost("any", over, false); math.Abs(got-(2000*7.5e-8+10*6e-7)) > 1e-15 {
		t.Errorf("over: %v", got)
	}
}
