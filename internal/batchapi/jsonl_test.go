package batchapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCustomIDRoundTrip(t *testing.T) {
	for _, i := range []int{0, 1, 9, 10, 17, 49999, 1 << 31, MaxIndex} {
		got, err := ParseCustomID(CustomID(i))
		if err != nil || got != i {
			t.Errorf("%d: %d %v", i, got, err)
		}
	}
}

func TestParseCustomIDRefuses(t *testing.T) {
	for _, s := range []string{"", "r", "R1", "r01", "r-1", "r+1", " r1", "r1 ", "r1\n", "r1.0", "rx", "row-1", "r١",
		"r1099511627776", "r99999999999999", "r00", "1"} {
		if _, err := ParseCustomID(s); !errors.Is(err, ErrCustomID) {
			t.Errorf("%q accepted", s)
		}
	}
}

func TestRequestWriterLines(t *testing.T) {
	var buf bytes.Buffer
	w := NewRequestWriter(&buf)
	body := "{\n  \"model\": \"m\",\n  \"messages\": [{\"role\":\"user\",\"content\":\"a\\nb \\\"q\\\"\"}]\n}"
	n, err := w.Write("r0", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write("r5", []byte(`{"model":"m"}`)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 || n != int64(len(lines[0])+1) || w.Lines() != 2 || w.Bytes() != int64(buf.Len()) {
		t.Fatalf("%d lines, n %d: %q", len(lines), n, buf.String())
	}
	var l struct {
		CustomID string         `json:"custom_id"`
		Method   string         `json:"method"`
		URL      string         `json:"url"`
		Body     map[string]any `json:"body"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &l); err != nil {
		t.Fatal(err)
	}
	if l.CustomID != "r0" || l.Method != "POST" || l.URL != "/v1/chat/completions" || l.Body["model"] != "m" {
		t.Fatalf("%+v", l)
	}
	if got := LineBytes("r5", []byte(`{"model":"m"}`)); got != int64(len(lines[1])+1) {
		t.Fatalf("LineBytes %d, line %d", got, len(lines[1])+1)
	}
	for _, bad := range []struct{ id, body string }{{"r0", `{}`}, {"x", `{}`}, {"r1", `[]`}, {"r1", `{"a":`}, {"r1", ``}, {"r1", `{} {}`}} {
		if _, err := w.Write(bad.id, []byte(bad.body)); err == nil {
			t.Errorf("%q %q accepted", bad.id, bad.body)
		}
	}
	if w.Lines() != 2 {
		t.Fatalf("lines %d", w.Lines())
	}
}

func TestReadResultsShapes(t *testing.T) {
	good := strings.Join([]string{
		`{"id":"batch_req_1","custom_id":"r0","response":{"status_code":200,"request_id":"q1","body":{"choices":[]}},"error":null}`,
		``,
		`{"id":"batch_req_2","custom_id":"r1","response":{"status_code":400,"request_id":"q2","body":{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}},"error":null}`,
		`{"id":"batch_req_3","custom_id":"r2","response":null,"error":{"code":"batch_expired","message":"This request could not be executed before the completion window expired."}}`,
	}, "\n")
	var got []Result
	err := ReadResults(strings.NewReader(good), 0, func(line int, r Result) error { got = append(got, r); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !got[0].OK() || got[1].OK() || got[1].ErrCode != "context_length_exceeded" || got[1].StatusCode != 400 ||
		got[2].ErrCode != CodeBatchExpired || got[2].StatusCode != 0 || got[2].Body != nil || got[2].Index != 2 || got[0].ID != "batch_req_1" {
		t.Fatalf("%+v", got)
	}
	for _, c := range []struct {
		text string
		line int
		msg  string
	}{
		{`{"custom_id":"r0","response":{"status_code":200,"body":{}}}` + "\n" + `{"custom_id":"r1","response":{"status_code":200,"body":{}}`, 2, "not valid JSON"},
		{`{"response":{"status_code":200,"body":{}}}`, 1, "no custom_id"},
		{"\n\n" + `{"custom_id":"row-7","response":{"status_code":200,"body":{}}}`, 3, "wrong form"},
		{`{"custom_id":7,"response":{"status_code":200,"body":{}}}`, 1, "not a string"},
		{`{"custom_id":"r1","response":null,"error":null}`, 1, "neither"},
		{`{"custom_id":"r1"}`, 1, "neither"},
		{`{"custom_id":"r1","response":{"status_code":200,"body":{}},"error":{"code":"x"}}`, 1, "both"},
		{`{"custom_id":"r1","response":{"body":{}}}`, 1, "status_code"},
		{`{"custom_id":"r1","response":{"status_code":200}}`, 1, "no body"},
		{`{"custom_id":"r1","response":"ok"}`, 1, "not an object"},
		{`{"custom_id":"r1","error":"boom"}`, 1, "error is not"},
		{`[1]`, 1, "not a JSON object"},
		{`{"custom_id":"r1","custom_id":"r2","response":{"status_code":200,"body":{}}}`, 1, "twice"},
		{`{"custom_id":"r1","response":{"status_code":200,"body":{}},"response":null,"error":{"code":"x"}}`, 1, "twice"},
		{`{"custom_id":"r1","response":{"status_code":200,"body":{}}} x`, 1, "not valid JSON"},
	} {
		err := ReadResults(strings.NewReader(c.text), 0, func(int, Result) error { return nil })
		var le *LineError
		if !errors.As(err, &le) || le.Line != c.line || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v (want line %d, %q)", c.text, err, c.line, c.msg)
		}
	}
}

func TestReadResultsBoundsTheLine(t *testing.T) {
	line := `{"custom_id":"r0","response":{"status_code":200,"body":{"x":"` + strings.Repeat("a", 1000) + `"}}}`
	text := line + "\n" + line + "\n"
	n := 0
	err := ReadResults(strings.NewReader(text), len(line), func(int, Result) error { n++; return nil })
	if err != nil || n != 2 {
		t.Fatalf("%d %v", n, err)
	}
	err = ReadResults(strings.NewReader("\n"+text), len(line)-1, func(int, Result) error { return nil })
	var le *LineError
	if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), "longer than") {
		t.Fatalf("%v", err)
	}
}

func TestReadResultsStopsOnCallbackError(t *testing.T) {
	text := `{"custom_id":"r0","response":{"status_code":200,"body":{}}}` + "\n" + `{"custom_id":"r9","response":{"status_code":200,"body":{}}}`
	stop := errors.New("custom_id never sent")
	err := ReadResults(strings.NewReader(text), 0, func(_ int, r Result) error {
		if r.Index == 9 {
			return stop
		}
		return nil
	})
	var le *LineError
	if !errors.Is(err, stop) || !errors.As(err, &le) || le.Line != 2 {
		t.Fatalf("%v", err)
	}
}
