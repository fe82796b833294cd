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
		if !strings.HasSuffix(lines[0], ",finished_ms,prompt_tokens,completion_tokens") && !strings.HasSuffix(lines[0], ",text,prompt_tokens,completion_tokens") {
			t.Fatalf("header %q", lines[0])
		}
		if !strings.HasPrefix(lines[1], "a,200,positive,,success,") || !strings.HasSuffix(lines[1], ",61,2") || !strings.HasSuffix(lines[2], ",,") {
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
