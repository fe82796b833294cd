// Package spend is what hfsent's calls cost: the prices of a model's
// tokens (--price-in/--price-out, or a LiteLLM price file), and a Ledger
// that charges every call the usage its provider reported (never a
// re-tokenisation), holds the estimates of the calls in flight against
// --max-spend, and says what a run spent and what its cache saved.
//
// It knows nothing of flags, rows or HTTP: the guard's spend layer charges
// each live call through it, a Batch API path charges its results with
// Charge(model, usage, true), and the engine reads the totals.
package spend

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/hfsent/hfsent/internal/provider"
)

// PerMillion turns a price per million tokens (as --price-in says it, and
// as price lists show it) into one per token.
const PerMillion = 1e6

// Price is what one model's tokens cost, in USD per token.
type Price struct {
	In, Out float64
	// InBatch and OutBatch are the prices through a Batch API, where the
	// price list gives them (LiteLLM's *_cost_per_token_batches); Batch
	// says whether it did.
	InBatch, OutBatch float64
	Batch             bool
	// CachedIn is the price of a prompt token the server read from its
	// prompt cache (LiteLLM's cache_read_input_token_cost,
	// --price-cached-in); Cached says whether it is known. Unknown, a
	// cached token is priced as any prompt token: never below what may
	// be charged.
	CachedIn float64
	Cached   bool
	// MaxInput is the model's context for the prompt, in tokens, where the
	// list gives it (LiteLLM's max_input_tokens); 0: unknown.
	MaxInput int
	// Tiers are the prices of OpenAI's service tiers other than the
	// default (LiteLLM's *_cost_per_token_flex and _priority), by the tier
	// an answer says served it (provider.Usage.Tier); a tier without one
	// is priced at In and Out.
	Flex, Priority TierPrice
}

// TierPrice is one service tier's price, USD per token; Set when the
// price list gives it.
type TierPrice struct {
	In, Out float64
	Set     bool
}

// tier is the price of the tier named (nil for the default, or one the
// list does not price).
func (p *Price) tier(name string) *TierPrice {
	switch {
	case name == "flex" && p.Flex.Set:
		return &p.Flex
	case name == "priority" && p.Priority.Set:
		return &p.Priority
	}
	return nil
}

// Cost is what usage u costs at p (batch: through a Batch API, at its
// prices when p has them, else at discount × the live ones; discount 0 is
// 1). ok is false when u reports no tokens.
func (p Price) Cost(u provider.Usage, batch bool, discount float64) (usd float64, ok bool) {
	if !u.Known {
		return 0, false
	}
	in, out := p.In, p.Out
	if t := p.tier(u.Tier); t != nil {
		in, out = t.In, t.Out
	}
	cached := in
	if p.Cached {
		cached = p.CachedIn
	}
	switch {
	case batch && p.Batch:
		// The batch's discount applies to the cached rate as to the other.
		if p.In > 0 {
			cached *= p.InBatch / p.In
		}
		in, out = p.InBatch, p.OutBatch
	case batch && discount > 0:
		in, out, cached = in*discount, out*discount, cached*discount
	}
	// Cached tokens are part of the prompt's: each priced once, at its
	// rate.
	c := min(max(u.Cached, 0), u.Prompt)
	return float64(u.Prompt-c)*in + float64(c)*cached + float64(u.Completion)*out, true
}

// Prices says what each model costs: one price for every model (flat:
// --price-in and --price-out), or a table by model id (--prices FILE).
// The zero value knows no price: every cost is unknown, never guessed.
type Prices struct {
	flat  *Price
	table map[string]Price
	// Source names where the prices came from, for messages.
	Source string
	// BatchDiscount, when set, prices a Batch API's tokens at this share
	// of the live price for a model the table gives no batch price.
	BatchDiscount float64
}

// Flat is one price for every model, given per million tokens.
func Flat(inPerMillion, outPerMillion float64) Prices {
	p := Price{In: inPerMillion / PerMillion, Out: outPerMillion / PerMillion}
	return Prices{flat: &p, Source: "--price-in/--price-out"}
}

// WithCachedIn is ps with the price of a cached prompt token (per million
// tokens) set for its flat price (--price-cached-in); a table's prices
// are left as they are.
func (ps Prices) WithCachedIn(perMillion float64) Prices {
	if ps.flat != nil {
		f := *ps.flat
		f.CachedIn, f.Cached = perMillion/PerMillion, true
		ps.flat = &f
	}
	return ps
}

// Table is a price for each model of table (USD per token), as source
// says (a cascade whose stages are priced apart).
func Table(table map[string]Price, source string) Prices {
	return Prices{table: table, Source: source}
}

// Known reports whether any price is known.
func (ps Prices) Known() bool { return ps.flat != nil || len(ps.table) > 0 }

// Len is how many models the table prices (0 for flat prices).
func (ps Prices) Len() int { return len(ps.table) }

// For is model's price. A table is looked up by the model id as given,
// then without a ":provider" suffix (the router's
// meta-llama/Llama-3.1-8B-Instruct:cerebras is listed as the model);
// nothing else is tried: a price that is not there is unknown, not
// guessed from a neighbour.
func (ps Prices) For(model string) (Price, bool) {
	if ps.flat != nil {
		return *ps.flat, true
	}
	if p, ok := ps.table[model]; ok {
		return p, true
	}
	if i := strings.LastIndexByte(model, ':'); i > 0 {
		if p, ok := ps.table[model[:i]]; ok {
			return p, true
		}
	}
	return Price{}, false
}

// MaxPriceFile bounds a price file: LiteLLM's own is about 1.5 MB.
const MaxPriceFile = 64 << 20

// LoadFile reads a price file in LiteLLM's
// model_prices_and_context_window.json format.
func LoadFile(path string) (Prices, error) {
	f, err := os.Open(path)
	if err != nil {
		return Prices{}, err
	}
	defer f.Close()
	ps, err := Parse(f)
	if err != nil {
		return Prices{}, fmt.Errorf("%s: %w", path, err)
	}
	ps.Source = "--prices " + path
	return ps, nil
}

// Parse reads LiteLLM's model_prices_and_context_window.json: an object
// whose keys are model ids and whose values are objects with (among many
// other fields, ignored) input_cost_per_token and output_cost_per_token,
// in USD per token, and where present input_cost_per_token_batches and
// output_cost_per_token_batches. An entry with neither cost (an
// embedding's, an image model's, the file's sample_spec) prices nothing;
// one with a cost that is not a number >= 0 refuses the file, naming it.
func Parse(r io.Reader) (Prices, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxPriceFile+1))
	if err != nil {
		return Prices{}, err
	}
	if len(b) > MaxPriceFile {
		return Prices{}, fmt.Errorf("larger than %d MiB: not a price file", MaxPriceFile>>20)
	}
	var doc map[string]json.RawMessage
	if t := bytes.TrimSpace(b); len(t) == 0 || t[0] != '{' {
		return Prices{}, errors.New("not a LiteLLM price file: not a JSON object of models")
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return Prices{}, fmt.Errorf("not a LiteLLM price file (a JSON object of models): %w", err)
	}
	ps := Prices{table: make(map[string]Price, len(doc))}
	for model, raw := range doc {
		if model == "sample_spec" {
			continue // the file's documentation of its fields
		}
		var e map[string]json.RawMessage
		if err := json.Unmarshal(raw, &e); err != nil {
			return Prices{}, fmt.Errorf("model %q: not an object", printable(model))
		}
		p, ok, err := entryPrice(e)
		if err != nil {
			return Prices{}, fmt.Errorf("model %q: %w", printable(model), err)
		}
		if ok {
			ps.table[model] = p
		}
	}
	return ps, nil
}

// entryPrice reads one model's costs; ok is false when it has neither the
// input nor the output price.
func entryPrice(e map[string]json.RawMessage) (Price, bool, error) {
	var p Price
	var have [5]bool
	for i, f := range []struct {
		name string
		v    *float64
	}{
		{"input_cost_per_token", &p.In}, {"output_cost_per_token", &p.Out},
		{"input_cost_per_token_batches", &p.InBatch}, {"output_cost_per_token_batches", &p.OutBatch},
		{"cache_read_input_token_cost", &p.CachedIn},
	} {
		raw, ok := e[f.name]
		if !ok || string(raw) == "null" {
			continue
		}
		v, err := cost(raw)
		if err != nil {
			return Price{}, false, fmt.Errorf("%s: %w", f.name, err)
		}
		*f.v, have[i] = v, true
	}
	if !have[0] && !have[1] {
		return Price{}, false, nil
	}
	if err := entryTiers(e, &p); err != nil {
		return Price{}, false, err
	}
	p.Batch = have[2] || have[3]
	p.Cached = have[4]
	if raw, ok := e["max_input_tokens"]; ok {
		// Documentation, not a price: a value that is no count is ignored.
		if v, err := cost(raw); err == nil && v >= 1 && v <= provider.MaxTokens {
			p.MaxInput = int(v)
		}
	}
	if p.Batch {
		// A list that gives one batch price and not the other means the
		// other is the live one.
		if !have[2] {
			p.InBatch = p.In
		}
		if !have[3] {
			p.OutBatch = p.Out
		}
	}
	return p, true, nil
}

// cost is a price as the file writes it: a JSON number, or a string
// holding one (some entries are written so), finite and not negative.
func cost(raw json.RawMessage) (float64, error) {
	s := string(raw)
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, errors.New("not a number")
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%.40q is not a number", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("%g is negative", v)
	}
	return v, nil
}

// printable cuts a model id for a message: the file is the user's, but a
// key may be anything.
func printable(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// AtBatch is ps as a Batch API charges: each model's batch price where
// the list gives one, else BatchDiscount × its live price, else (no
// discount given) the live price itself, never a guess below what may be
// charged. A ledger of these prices charges a batch's usage as a live
// ledger charges a call's.
func (ps Prices) AtBatch() Prices {
	at := func(p Price) Price {
		in, out := p.In, p.Out
		switch {
		case p.Batch:
			in, out = p.InBatch, p.OutBatch
		case ps.BatchDiscount > 0:
			in, out = in*ps.BatchDiscount, out*ps.BatchDiscount
		}
		cached := p.CachedIn
		if p.Batch && p.In > 0 {
			cached *= p.InBatch / p.In
		} else if !p.Batch && ps.BatchDiscount > 0 {
			cached *= ps.BatchDiscount
		}
		return Price{In: in, Out: out, InBatch: in, OutBatch: out, Batch: true, CachedIn: cached, Cached: p.Cached, MaxInput: p.MaxInput}
	}
	out := Prices{Source: ps.Source, BatchDiscount: ps.BatchDiscount}
	if ps.flat != nil {
		f := at(*ps.flat)
		out.flat = &f
	}
	if ps.table != nil {
		out.table = make(map[string]Price, len(ps.table))
		for k, p := range ps.table {
			out.table[k] = at(p)
		}
	}
	return out
}

// HasBatch reports whether model's batch price is known: the list gives
// one, or BatchDiscount prices it.
func (ps Prices) HasBatch(model string) bool {
	p, ok := ps.For(model)
	return ok && (p.Batch || ps.BatchDiscount > 0)
}

// entryTiers reads an entry's flex and priority prices: a tier with one
// of its two prices takes the default's for the other.
func entryTiers(e map[string]json.RawMessage, p *Price) error {
	for _, tier := range []string{"flex", "priority"} {
		t := TierPrice{In: p.In, Out: p.Out}
		for i, dir := range []string{"input", "output"} {
			name := dir + "_cost_per_token_" + tier
			raw, ok := e[name]
			if !ok || string(raw) == "null" {
				continue
			}
			v, err := cost(raw)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if i == 0 {
				t.In = v
			} else {
				t.Out = v
			}
			t.Set = true
		}
		if tier == "flex" {
			p.Flex = t
		} else {
			p.Priority = t
		}
	}
	return nil
}
