package batchapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
)

func TestClientUploadCreateGetCancelContent(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	ctx := context.Background()

	var buf bytes.Buffer
	rw := NewRequestWriter(&buf)
	for i := range 3 {
		if _, err := rw.Write(CustomID(i), []byte(`{"model":"m","messages":[{"role":"user","content":"t"}]}`)); err != nil {
			t.Fatal(err)
		}
	}
	want := buf.String()
	f, err := c.Upload(ctx, "rows.jsonl", &buf)
	if err != nil {
		t.Fatal(err)
	}
	if f.ID != "file-1" || f.Bytes != int64(len(want)) || f.Status != "processed" {
		t.Fatalf("file %+v", f)
	}
	if got := string(o.files["file-1"]); got != want {
		t.Fatalf("stored %q, want %q", got, want)
	}
	if o.purpose != "batch" || o.filename != "rows.jsonl" {
		t.Fatalf("purpose %q filename %q", o.purpose, o.filename)
	}

	b, err := c.Create(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b.ID != "batch_1" || b.Status != StatusValidating || b.InputFileID != "file-1" || b.Ended() {
		t.Fatalf("created %+v", b)
	}
	cr := o.creates[0]
	if cr["input_file_id"] != "file-1" || cr["endpoint"] != "/v1/chat/completions" || cr["completion_window"] != "24h" || len(cr) != 3 {
		t.Fatalf("create body %v", cr)
	}

	o.set(b.ID, func(m map[string]any) {
		m["status"] = StatusCompleted
		m["output_file_id"] = "file-out"
		m["error_file_id"] = "file-err"
		m["request_counts"] = map[string]int{"total": 3, "completed": 2, "failed": 1}
	})
	o.files["file-out"] = []byte(`{"id":"batch_req_1","custom_id":"r0","response":{"status_code":200,"request_id":"req_1","body":{"object":"chat.completion"}},"error":null}` + "\n")
	b, err = c.Get(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Ended() || b.OutputFileID != "file-out" || b.ErrorFileID != "file-err" || b.Counts != (RequestCounts{3, 2, 1}) || b.ExpiresAt != 1700086400 {
		t.Fatalf("got %+v", b)
	}
	rc, err := c.Content(ctx, b.OutputFileID)
	if err != nil {
		t.Fatal(err)
	}
	var got []Result
	if err := ReadResults(rc, 0, func(_ int, r Result) error { got = append(got, r); return nil }); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if len(got) != 1 || got[0].Index != 0 || got[0].StatusCode != 200 || got[0].RequestID != "req_1" || string(got[0].Body) != `{"object":"chat.completion"}` {
		t.Fatalf("results %+v", got)
	}

	b, err = c.Cancel(ctx, b.ID)
	if err != nil || b.Status != StatusCancelling || b.Ended() {
		t.Fatalf("cancel: %+v %v", b, err)
	}
}

func TestErrorsNeverShowTheToken(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	c.Token = "sk-wrong-0123456789abcdefghij"
	_, err := c.Get(context.Background(), "batch_1")
	e, ok := AsError(err)
	if !ok || e.Status != 401 || e.Code != "invalid_api_key" || e.Outcome() != outcome.UpstreamAuth || !e.Final() || e.Retryable() {
		t.Fatalf("err %#v", err)
	}
	if strings.Contains(err.Error(), c.Token) || strings.Contains(err.Error(), "0123456789") {
		t.Fatalf("token shown: %v", err)
	}
	if !strings.Contains(err.Error(), "REDACTED") || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("message: %v", err)
	}
}

func TestGetRetriesThen5xxSucceeds(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	ctx := context.Background()
	b, err := c.Create(ctx, "file-x")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	o.fail = func(r *http.Request) (int, string, http.Header, bool) {
		if r.Method != "GET" || n >= 2 {
			return 0, "", nil, false
		}
		n++
		if n == 1 {
			return 429, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, http.Header{"Retry-After-Ms": {"5"}}, true
		}
		return 503, `{"error":{"message":"overloaded","type":"server_error","code":null}}`, nil, true
	}
	got, err := c.Get(ctx, b.ID)
	if err != nil || got.ID != b.ID {
		t.Fatalf("%+v %v", got, err)
	}
	if h := o.hit("GET batch"); h != 3 {
		t.Fatalf("%d gets, want 3", h)
	}
}

func TestCreateIsNotRetried(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	o.fail = func(r *http.Request) (int, string, http.Header, bool) {
		return 500, `{"error":{"message":"The server had an error","type":"server_error","code":null}}`, nil, true
	}
	_, err := c.Create(context.Background(), "file-x")
	e, ok := AsError(err)
	if !ok || e.Status != 500 || !e.Retryable() || e.Outcome() != outcome.UpstreamFailed {
		t.Fatalf("%v", err)
	}
	if h := o.hit("POST batches"); h != 1 {
		t.Fatalf("%d creates, want 1", h)
	}
}

func TestGetHonoursContext(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	c.Backoff = time.Hour
	c.MaxBackoff = 2 * time.Hour
	o.fail = func(r *http.Request) (int, string, http.Header, bool) { return 503, `{}`, nil, true }
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Get(ctx, "batch_1")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v", err)
	}
}

func TestContentNotFound(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	rc, err := c.Content(context.Background(), "file-none")
	if err == nil {
		io.Copy(io.Discard, rc)
		t.Fatal("no error")
	}
	e, ok := AsError(err)
	if !ok || e.Status != 404 || e.Outcome() != outcome.UpstreamNotFound || e.Retryable() {
		t.Fatalf("%v", err)
	}
}

func TestRootOf(t *testing.T) {
	for in, want := range map[string]string{
		"https://api.openai.com/v1/chat/completions":        "https://api.openai.com/v1",
		"http://127.0.0.1:8080/v1/chat/completions/":        "http://127.0.0.1:8080/v1",
		"https://api.groq.com/openai/v1/chat/completions":   "https://api.groq.com/openai/v1",
		"https://h.example/v1/chat/completions?api_key=abc": "https://h.example/v1?api_key=abc",
	} {
		if got, err := RootOf(in); err != nil || got != want {
			t.Errorf("RootOf(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := RootOf("https://u:secretpw@h.example/v1/embeddings"); err == nil || strings.Contains(err.Error(), "secretpw") {
		t.Errorf("err %v", err)
	}
}

// A 429 on create made no batch: it is waited for and sent again.
func TestCreateRetriedAfter429(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	n := 0
	o.fail = func(r *http.Request) (int, string, http.Header, bool) {
		if r.Method != "POST" || n >= 1 {
			return 0, "", nil, false
		}
		n++
		return 429, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`, http.Header{"Retry-After-Ms": {"5"}}, true
	}
	b, err := c.Create(context.Background(), "file-x")
	if err != nil || b.ID == "" {
		t.Fatalf("%+v %v", b, err)
	}
	if h := o.hit("POST batches"); h != 2 {
		t.Fatalf("%d creates, want 2", h)
	}
}
