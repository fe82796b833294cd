package batchapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzReadResults: whatever the file, ReadResults never panics, refuses
// with a *LineError naming a line that exists, and every result it does
// give names a row in CustomID's one form, with a response or an error,
// never both. Seeds: testdata/fuzz/FuzzReadResults.
func FuzzReadResults(f *testing.F) {
	f.Add([]byte(`{"id":"batch_req_1","custom_id":"r0","response":{"status_code":200,"request_id":"q","body":{"choices":[]}},"error":null}` + "\n"))
	f.Add([]byte(`{"custom_id":"r2","response":null,"error":{"code":"batch_expired","message":"expired"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxLine = 4096
		lines := bytes.Count(data, []byte("\n")) + 1
		var got []Result
		err := ReadResults(bytes.NewReader(data), maxLine, func(line int, r Result) error {
			if line < 1 || line > lines {
				t.Fatalf("line %d of %d", line, lines)
			}
			got = append(got, r)
			return nil
		})
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || le.Line < 1 || le.Line > lines {
				t.Fatalf("%v: not a LineError within the %d lines", err, lines)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error on several lines: %q", err)
			}
			return
		}
		for _, r := range got {
			if CustomID(r.Index) != r.CustomID {
				t.Fatalf("custom_id %q read as row %d", r.CustomID, r.Index)
			}
			if (r.StatusCode == 0) != (r.Body == nil) || r.Body != nil && !json.Valid(r.Body) {
				t.Fatalf("status %d with body %q", r.StatusCode, r.Body)
			}
			if strings.ContainsAny(r.ErrMessage, "\r\n\t") || utf8.RuneCountInString(r.ErrMessage) > MaxMessage+1 || !utf8.ValidString(r.ErrMessage) {
				t.Fatalf("message not summarised: %q", r.ErrMessage)
			}
		}
	})
}

// FuzzParseCustomID: ParseCustomID accepts exactly what CustomID makes, so
// two custom_ids never name the same row.
func FuzzParseCustomID(f *testing.F) {
	for _, s := range []string{"r0", "r17", "r01", "r-1", "R1", "r", "", "r1099511627775", "r1099511627776", "r١"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseCustomID(s)
		if err != nil {
			if !errors.Is(err, ErrCustomID) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if n < 0 || n > MaxIndex || CustomID(n) != s {
			t.Fatalf("%q read as %d, which CustomID writes %q", s, n, CustomID(n))
		}
	})
}

// BenchmarkReadResults reads an output file of chat completions; B/op per
// line stays that of one line (the body kept), whatever the file's length.
func BenchmarkReadResults(b *testing.B) {
	var buf bytes.Buffer
	const n = 10000
	for i := range n {
		buf.WriteString(`{"id":"batch_req_` + CustomID(i) + `","custom_id":"` + CustomID(i) + `","response":{"status_code":200,"request_id":"req_1","body":{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"positive"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":120,"completion_tokens":1,"total_tokens":121}}},"error":null}` + "\n")
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		lines := 0
		if err := ReadResults(bytes.NewReader(data), 0, func(int, Result) error { lines++; return nil }); err != nil || lines != n {
			b.Fatal(err, lines)
		}
	}
}
