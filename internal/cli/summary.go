package cli

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/results"
)

// summaryLine is the one-line account printed on stderr at the end.
func summaryLine(s engine.Summary) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rows=%d", s.Rows)
	if s.Lost > 0 {
		// After a write error: the counts below cover every row that got an
		// outcome, written or not.
		fmt.Fprintf(&b, " written=%d lost=%d", s.Written, s.Lost)
	}
	for _, c := range outcome.All() {
		if n := s.Counts[c]; n > 0 || c == outcome.Success {
			fmt.Fprintf(&b, " %s=%d", c, n)
		}
	}
	if s.Kept > 0 {
		fmt.Fprintf(&b, " kept=%d", s.Kept)
	}
	if s.Reused > 0 {
		fmt.Fprintf(&b, " reused=%d", s.Reused)
	}
	if s.CacheHits > 0 || s.Cache.Misses > 0 {
		// A run with a response cache: the rows it answered without a call.
		fmt.Fprintf(&b, " cache_hits=%d", s.CacheHits)
	}
	fmt.Fprintf(&b, " calls=%d", s.Provider.Calls)
	if s.Provider.FallbackCalls > 0 {
		fmt.Fprintf(&b, " fallback_calls=%d", s.Provider.FallbackCalls)
	}
	if s.Provider.TokenCalls > 0 {
		// Only a provider that reports usage (chat) has tokens to count.
		fmt.Fprintf(&b, " prompt_tokens=%d completion_tokens=%d", s.Provider.PromptTokens, s.Provider.CompletionTokens)
		if s.Provider.ReasoningTokens > 0 {
			// A reasoning model's, of completion_tokens: billed as output.
			fmt.Fprintf(&b, " reasoning_tokens=%d", s.Provider.ReasoningTokens)
		}
		if s.Provider.CachedPromptTokens > 0 {
			// Part of prompt_tokens, read from the server's prompt cache.
			fmt.Fprintf(&b, " cached_prompt_tokens=%d", s.Provider.CachedPromptTokens)
		}
	}
	if s.Spend.Priced {
		// Only with prices, or a server that reports its own costs.
		fmt.Fprintf(&b, " cost_usd=%s", results.FormatUSD(s.Spend.Spent))
		if s.Cache.Costed {
			fmt.Fprintf(&b, " saved_usd=%s", results.FormatUSD(s.Cache.SavedUSD))
		}
	}
	fmt.Fprintf(&b, " retries=%d max_active=%d elapsed=%s", s.Provider.Retries, s.MaxActive, s.Elapsed.Round(time.Millisecond))
	if secs := s.Elapsed.Seconds(); secs > 0 {
		fmt.Fprintf(&b, " rows/s=%.1f", float64(s.Rows)/secs)
	}
	b.WriteString(resilienceLine(s.Provider))
	if s.Stop != engine.StopNone {
		fmt.Fprintf(&b, " stopped=%q", string(s.Stop))
	}
	return b.String()
}

type summaryJSON struct {
	Rows int64 `json:"rows"`
	// Written of the rows are in the results; Lost got an outcome but could
	// not be written (after a write error).
	Written       int64            `json:"written"`
	Lost          int64            `json:"lost"`
	Outcomes      map[string]int64 `json:"outcomes"`
	Calls         int64            `json:"calls"`
	FallbackCalls int64            `json:"fallback_calls"`
	// Tokens the provider reported (chat; 0 for the others).
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// ReasoningTokens are a reasoning model's, counted in completion_tokens.
	ReasoningTokens int64 `json:"reasoning_tokens"`
	Kept            int64 `json:"kept"`
	Reused          int64 `json:"reused"`
	CacheHits       int64 `json:"cache_hits"`
	// CachedPromptTokens: the part of PromptTokens the server read from
	// its prompt cache (priced at the cached rate where one is known).
	CachedPromptTokens int64 `json:"cached_prompt_tokens"`
	// CostUSD is what the calls cost, SavedUSD what the cache's hits
	// would have: null when no price is known.
	CostUSD    *float64       `json:"cost_usd"`
	SavedUSD   *float64       `json:"saved_usd"`
	Retries    int64          `json:"retries"`
	MaxActive  int64          `json:"max_active"`
	ElapsedSec float64        `json:"elapsed_s"`
	RowsPerSec float64        `json:"rows_per_s"`
	Stop       string         `json:"stop,omitempty"`
	ExitCode   int            `json:"exit_code"`
	Resilience resilienceJSON `json:"resilience"`
	ciSummary
	// Quality is the evaluation against the gold labels (--gold-column);
	// Review the rows marked for review (--review-below).
	Quality *quality.Report `json:"quality,omitempty"`
	Review  *int64          `json:"review,omitempty"`
	// QualityShort says which quality gate fell short (exit 3).
	QualityShort string `json:"quality_short,omitempty"`
	// Stages is what each stage of a --cascade did.
	Stages []stageJSON `json:"stages,omitempty"`
}

// stageJSON is one stage of a cascade in --summary-json: the rows that
// reached it, those it answered and those it sent on, its calls, cache
// hits and cost, and (with --gold-column) its accuracy on the rows it
// answered.
type stageJSON struct {
	Stage     int      `json:"stage"`
	Model     string   `json:"model"`
	Reached   int64    `json:"reached"`
	Rows      int64    `json:"rows"`
	Escalated int64    `json:"escalated"`
	Calls     int64    `json:"calls"`
	CacheHits int64    `json:"cache_hits"`
	CostUSD   *float64 `json:"cost_usd"`
	Accuracy  *float64 `json:"accuracy,omitempty"`
}

// stageKeys are a cascade's keys on the summary line, stage by stage:
// stageN_rows (answered), stageN_escalated, stageN_calls, then, when
// there are, stageN_cache_hits, stageN_cost_usd and (with gold labels)
// stageN_accuracy; "" for a run that is not a --cascade.
func stageKeys(s engine.Summary, cascade bool, acc []*float64) string {
	if !cascade {
		return ""
	}
	var b strings.Builder
	for i, st := range s.Stages {
		n := i + 1
		fmt.Fprintf(&b, " stage%d_rows=%d stage%d_escalated=%d stage%d_calls=%d", n, st.Answered, n, st.Escalated, n, st.Provider.Calls)
		if st.CacheHits > 0 {
			fmt.Fprintf(&b, " stage%d_cache_hits=%d", n, st.CacheHits)
		}
		if st.Costed {
			fmt.Fprintf(&b, " stage%d_cost_usd=%s", n, results.FormatUSD(st.CostUSD))
		}
		if i < len(acc) {
			fmt.Fprintf(&b, " stage%d_accuracy=%s", n, fixed(acc[i]))
		}
	}
	return b.String()
}

// stagesJSON is a cascade's stages for --summary-json (nil without one).
func stagesJSON(s engine.Summary, cascade bool, acc []*float64) []stageJSON {
	if !cascade {
		return nil
	}
	out := make([]stageJSON, len(s.Stages))
	for i, st := range s.Stages {
		out[i] = stageJSON{Stage: i + 1, Model: st.Model, Reached: st.Reached, Rows: st.Answered, Escalated: st.Escalated,
			Calls: st.Provider.Calls, CacheHits: st.CacheHits}
		if st.Costed {
			c := roundUSD(st.CostUSD)
			out[i].CostUSD = &c
		}
		if i < len(acc) {
			out[i].Accuracy = acc[i]
		}
	}
	return out
}

func writeSummaryJSON(path string, s engine.Summary, v verdict, q *qualityRun, cascade bool) error {
	code := v.Code
	out := summaryJSON{
		Resilience:         newResilienceJSON(s.Provider),
		Rows:               s.Rows,
		Written:            s.Written,
		Lost:               s.Lost,
		Outcomes:           map[string]int64{},
		Calls:              s.Provider.Calls,
		FallbackCalls:      s.Provider.FallbackCalls,
		PromptTokens:       s.Provider.PromptTokens,
		CompletionTokens:   s.Provider.CompletionTokens,
		ReasoningTokens:    s.Provider.ReasoningTokens,
		Kept:               s.Kept,
		Reused:             s.Reused,
		CacheHits:          s.CacheHits,
		Retries:            s.Provider.Retries,
		MaxActive:          s.MaxActive,
		ElapsedSec:         s.Elapsed.Seconds(),
		Stop:               string(s.Stop),
		ExitCode:           code,
		CachedPromptTokens: s.Provider.CachedPromptTokens,
	}
	for _, c := range outcome.All() {
		out.Outcomes[string(c)] = s.Counts[c]
	}
	if s.Spend.Priced {
		spent, saved := roundUSD(s.Spend.Spent), roundUSD(s.Cache.SavedUSD)
		out.CostUSD, out.SavedUSD = &spent, &saved
	}
	if secs := s.Elapsed.Seconds(); secs > 0 {
		out.RowsPerSec = float64(s.Rows) / secs
	}
	out.ciSummary = newCISummary(s, v)
	out.QualityShort = v.QualityShort
	out.Stages = stagesJSON(s, cascade, q.stageAccuracy())
	if q != nil {
		out.Quality = q.report
		if q.o.review() {
			out.Review = &q.tally.Reviewed
		}
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// roundUSD is an amount as summaries write it: to the ten-billionth.
func roundUSD(v float64) float64 { return math.Round(v*1e10) / 1e10 }
