package results

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/outcome"
)

func TestGuard(t *testing.T) {
	for in, want := range map[string]string{
		"=HYPERLINK(\"http://x\")": "'=HYPERLINK(\"http://x\")",
		"@SUM(1)":                  "'@SUM(1)",
		"+1":                       "'+1",
		"-1":                       "'-1",
		"\tx":                      "'\tx",
		"\rx":                      "'\rx",
		"=cmd|' /C calc'!A0":       "'=cmd|' /C calc'!A0",
		"'=x":                      "''=x", // a real leading ' before a trigger is kept
		"''":                       "'''",
		"''x":                      "'''x",
		"'":                        "'",
		"'x":                       "'x",
		"":                         "",
		"POSITIVE":                 "POSITIVE",
		" =1":                      " =1",
		"a=b":                      "a=b",
	} {
		if got := Guard(in); got != want {
			t.Errorf("Guard(%q) = %q, want %q", in, got, want)
		}
		if back := Unguard(Guard(in)); back != in {
			t.Errorf("Unguard(Guard(%q)) = %q", in, back)
		}
	}
}

// The writer guards text, label and error, never the id; --raw-csv writes
// them as they are; the stream reads the guarded form back, so a kept row
// is rewritten byte for byte (no second quote) and a label "-1" is -1.
func TestWriterGuardsAndStreamReadsBack(t *testing.T) {
	rows := []Row{
		{RequestID: "=id", Label: "-1", Score: 0.5, Outcome: outcome.Success, Model: "m", Attempts: 1, LatencyMs: 1, StartedMs: 0, FinishedMs: 1, Text: "=HYPERLINK(\"http://evil\",\"x\")"},
		{RequestID: "b", Outcome: outcome.UpstreamPayload, Error: "@not a classification", StartedMs: -1, FinishedMs: 2, Text: "'=already quoted"},
		{RequestID: "c", Label: "+", Score: 1, Outcome: outcome.Success, Model: "m", StartedMs: -1, FinishedMs: 3, Text: "\tindented"},
	}
	b := written(t, true, rows...)
	want := "request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms,text,prompt_tokens,completion_tokens,cost_usd,cached\n" +
		"=id,200,'-1,0.5,success,m,1,1,,0,0,1,\"'=HYPERLINK(\"\"http://evil\"\",\"\"x\"\")\",,,,false\n" +
		"b,502,,,upstream_payload,,0,,'@not a classification,0,,2,''=already quoted,,,,false\n" +
		"c,200,'+,1,success,m,0,,,0,,3,'\tindented,,,,false\n"
	if string(b) != want {
		t.Fatalf("guarded:\n%s\nwant\n%s", b, want)
	}
	got, _, err := readAll(t, b, true)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if got[i].RequestID != rows[i].RequestID || got[i].Label != rows[i].Label || got[i].Error != rows[i].Error || got[i].Text != rows[i].Text {
			t.Errorf("row %d read back as %+v, want %+v", i, got[i], rows[i])
		}
	}
	if again := written(t, true, got...); !bytes.Equal(again, b) {
		t.Fatalf("rewriting the rows read back changed the file:\n%s", again)
	}

	var raw bytes.Buffer
	w, err := NewWriter(&raw, true, Raw(true))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(raw.String(), "'-1") || !strings.Contains(raw.String(), ",-1,") || !strings.Contains(raw.String(), ",@not a classification,") {
		t.Fatalf("--raw-csv guarded a field:\n%s", raw.String())
	}
}

// FuzzGuard: Unguard undoes Guard for every string, and what Guard writes
// never begins with a trigger.
func FuzzGuard(f *testing.F) {
	for _, s := range []string{"", "=", "'", "''", "'=", "-1", "@x", "\t", "\r\n", "plain", "'''=x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g := Guard(s)
		if Unguard(g) != s {
			t.Fatalf("Unguard(Guard(%q)) = %q", s, Unguard(g))
		}
		if g != "" && isTrigger(g[0]) {
			t.Fatalf("Guard(%q) = %q begins with a trigger", s, g)
		}
		if g != s && g != "'"+s {
			t.Fatalf("Guard(%q) = %q: only a leading ' may be added", s, g)
		}
	})
}

// FuzzGuardedRoundTrip: a row written with the guard and read back by the
// stream (as --resume reads it) has the same text, label and error.
func FuzzGuardedRoundTrip(f *testing.F) {
	f.Add("-1", "@err", "=HYPERLINK(\"x\")")
	f.Add("'=", "''", "'")
	f.Add("+", "\tx", "\rx")
	f.Fuzz(func(t *testing.T, label, errText, text string) {
		if strings.Contains(label+errText+text, "\r\n") {
			t.Skip("CSV reads a quoted CRLF as LF, guard or not")
		}
		in := Row{RequestID: "id", Label: label, Outcome: outcome.UpstreamPayload, Error: errText, StartedMs: -1, Text: text}
		b := written(t, true, in)
		got, _, err := readAll(t, b, true)
		if err != nil || len(got) != 1 {
			t.Fatalf("%q: %d rows, %v", b, len(got), err)
		}
		if got[0].Label != label || got[0].Error != errText || got[0].Text != text {
			t.Fatalf("wrote %q %q %q, read %q %q %q", label, errText, text, got[0].Label, got[0].Error, got[0].Text)
		}
	})
}
