package results

import (
	"math"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/outcome"
)

// The token columns come after every other, blank without usage; a label
// without a score (a chat answer without logprobs) has a blank score; both
// read back as written.
func TestTokenColumnsAndBlankScoreRoundTrip(t *testing.T) {
	rows := []Row{
		{RequestID: "a", Label: "positive", Score: math.NaN(), Outcome: outcome.Success, Model: "m", Attempts: 1, StartedMs: 0, FinishedMs: 5,
			PromptTokens: 61, CompletionTokens: 2, Tokens: true},
		{RequestID: "b", Label: "POSITIVE", Score: 0.5, Outcome: outcome.Success, Model: "m", Attempts: 1, StartedMs: 0, FinishedMs: 6},
		{RequestID: "c", Outcome: outcome.UpstreamUnlabelled, Error: `the answer names no label of --labels: "maybe"`, Attempts: 2, StartedMs: 0, FinishedMs: 7,
			PromptTokens: 120, CompletionTokens: 4, Tokens: true},
	}
	for _, text := range []bool{false, true} {
		b := written(t, text, rows...)
		lines := strings.Split(string(b), "\n")
		if !strings.HasSuffix(lines[0], ",finished_ms,prompt_tokens,completion_tokens,cost_usd,cached") && !strings.HasSuffix(lines[0], ",text,prompt_tokens,completion_tokens,cost_usd,cached") {
			t.Fatalf("header %q", lines[0])
		}
		if !strings.HasPrefix(lines[1], "a,200,positive,,success,") || !strings.HasSuffix(lines[1], ",61,2,,false") || !strings.HasSuffix(lines[2], ",,,,false") {
			t.Fatalf("rows:\n%s", b)
		}
		got, _, err := readAll(t, b, text)
		if err != nil {
			t.Fatal(err)
		}
		if !math.IsNaN(got[0].Score) || !got[0].Tokens || got[0].PromptTokens != 61 || got[1].Tokens || got[2].CompletionTokens != 4 {
			t.Fatalf("read back %+v", got)
		}
		if again := written(t, text, got...); string(again) != string(b) {
			t.Fatalf("round trip changed the file:\n%s\nwant\n%s", again, b)
		}
	}
}

// A file written before the token columns is read (for --resume, and
// report), with or without the text column.
func TestStreamReadsFilesWithoutTokenColumns(t *testing.T) {
	for _, text := range []bool{false, true} {
		old := strings.Join(legacyColumns(text), ",") + "\n" + "a,200,POSITIVE,0.9,success,m,1,3,,0,0,3"
		if text {
			old += ",fine"
		}
		old += "\n"
		got, _, err := readAll(t, []byte(old), text)
		if err != nil || len(got) != 1 || got[0].Label != "POSITIVE" || got[0].Tokens {
			t.Fatalf("text %v: %+v, %v", text, got, err)
		}
		if _, _, err := readAll(t, []byte(old), !text); err == nil {
			t.Fatalf("text %v: read as the other form", text)
		}
	}
}

// The cost columns come after the token columns: cost_usd blank without a
// price, 0 for a row answered without a call; cached true for a cache hit.
// Both read back; a file written before them (with the token columns) is
// still read.
func TestCostColumnsRoundTrip(t *testing.T) {
	rows := []Row{
		{RequestID: "a", Label: "positive", Score: 0.9, Outcome: outcome.Success, Model: "m", Attempts: 1, FinishedMs: 5,
			PromptTokens: 61, CompletionTokens: 2, Tokens: true, CostUSD: 0.1 + 0.2, Costed: true},
		{RequestID: "b", Label: "negative", Score: 0.8, Outcome: outcome.Success, Model: "m", StartedMs: -1, FinishedMs: 6, Costed: true, Cached: true},
		{RequestID: "c", Outcome: outcome.UpstreamFailed, Attempts: 1, FinishedMs: 7},
	}
	b := written(t, false, rows...)
	lines := strings.Split(string(b), "\n")
	if !strings.HasSuffix(lines[1], ",61,2,0.3,false") || !strings.HasSuffix(lines[2], ",,,0,true") || !strings.HasSuffix(lines[3], ",,,,false") {
		t.Fatalf("rows:\n%s", b)
	}
	got, _, err := readAll(t, b, false)
	if err != nil {
		t.Fatal(err)
	}
	if !got[0].Costed || got[0].CostUSD != 0.3 || !got[1].Cached || !got[1].Costed || got[1].CostUSD != 0 || got[2].Costed || got[2].Cached {
		t.Fatalf("read back %+v", got)
	}
	old := strings.Join(Columns(false)[:len(Columns(false))-2], ",") + "\na,200,POSITIVE,0.9,success,m,1,3,,0,0,3,10,1\n"
	if got, _, err := readAll(t, []byte(old), false); err != nil || len(got) != 1 || !got[0].Tokens || got[0].Costed {
		t.Fatalf("a file without the cost columns: %+v, %v", got, err)
	}
}
