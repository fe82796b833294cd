package results

import (
	"bytes"
	"errors"
	"testing"

	"github.com/hfsent/hfsent/internal/outcome"
)

func TestWriterFormatsAndFreezes(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf, true)
	if err != nil {
		t.Fatal(err)
	}
	rows := []Row{
		{RequestID: "a", Label: "POSITIVE", Score: 0.99876, Outcome: outcome.Success, Model: "m", Attempts: 2, LatencyMs: 31, QueuedMs: 1, StartedMs: 2, FinishedMs: 33, Text: "x, \"y\""},
		{RequestID: "b", Outcome: outcome.InvalidInput, Error: "blank text", StartedMs: -1, QueuedMs: 3, FinishedMs: 3},
	}
	if err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	want := "request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms,text,prompt_tokens,completion_tokens,cost_usd,cached\n" +
		"a,200,POSITIVE,0.9988,success,m,2,31,,1,2,33,\"x, \"\"y\"\"\",,,,false\n" +
		"b,422,,,invalid_input,,0,,blank text,3,,3,,,,,false\n"
	if buf.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", buf.String(), want)
	}
	w.Freeze()
	if err := w.Write(rows); !errors.Is(err, ErrFrozen) {
		t.Fatalf("write after Freeze: %v", err)
	}
	if buf.String() != want {
		t.Fatal("a frozen writer wrote")
	}
}

func TestStatusTable(t *testing.T) {
	want := map[outcome.Code]int{
		outcome.Success: 200, outcome.Fallback: 200, outcome.InvalidInput: 422, outcome.LocalCapacity: 503,
		outcome.UpstreamTimeout: 504, outcome.UpstreamRateLimited: 503, outcome.UpstreamFailed: 502,
		outcome.UpstreamRequestRejected: 502, outcome.UpstreamAuth: 502, outcome.UpstreamPayload: 502,
		outcome.UpstreamQuota: 502, outcome.UpstreamNotFound: 502, outcome.UpstreamEndpoint: 502,
		outcome.UpstreamUnlabelled: 502, outcome.UpstreamTruncated: 502, outcome.UpstreamRefused: 502, outcome.CircuitOpen: 503, outcome.NotAttempted: 503,
	}
	if len(outcome.All()) != len(want) {
		t.Fatalf("%d codes, the table has %d", len(outcome.All()), len(want))
	}
	for _, c := range outcome.All() {
		if got := (Row{Outcome: c}).Status(); got != want[c] {
			t.Errorf("%s: status %d, want %d", c, got, want[c])
		}
	}
}
