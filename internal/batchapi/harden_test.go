package batchapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
)

// sizedLines is lines that say their length, as a bytes.Buffer does.
type sizedLines struct{ *lines }

func (s sizedLines) Len() int { return int(s.left) }

func TestUploadSaysContentLengthWhenSizeKnown(t *testing.T) {
	for _, c := range []struct {
		name  string
		input func() io.Reader
		sized bool
	}{
		{"buffer", func() io.Reader { return bytes.NewBufferString(strings.Repeat("x", 1000)) }, true},
		{"unknown", func() io.Reader { return io.MultiReader(strings.NewReader(strings.Repeat("x", 1000))) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cl atomic.Int64
			var te atomic.Value
			var got atomic.Int64
			files := discardFiles(&got)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				cl.Store(r.ContentLength)
				te.Store(strings.Join(r.TransferEncoding, ","))
				files.ServeHTTP(w, r)
			}))
			defer srv.Close()
			cli := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1"}
			f, err := cli.Upload(context.Background(), "a.jsonl", c.input())
			if err != nil || f.Bytes != 1000 || got.Load() != 1000 {
				t.Fatalf("%+v %v (server read %d)", f, err, got.Load())
			}
			if c.sized && (cl.Load() <= 1000 || te.Load() != "") || !c.sized && (cl.Load() != -1 || te.Load() != "chunked") {
				t.Fatalf("Content-Length %d, Transfer-Encoding %q", cl.Load(), te.Load())
			}
		})
	}
}

// short says it has more bytes than it gives.
type short struct{ r io.Reader }

func (s short) Read(p []byte) (int, error) { return s.r.Read(p) }
func (s short) Len() int                   { return 1000 }

func TestUploadOfAnInputThatShrinks(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(discardFiles(&got))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1"}
	_, err := c.Upload(context.Background(), "a.jsonl", short{strings.NewReader("0123456789")})
	if err == nil || !strings.Contains(err.Error(), "ended after 10 of the 1000 bytes") {
		t.Fatalf("%v", err)
	}
}

// watched fails the test if read after Upload has returned.
type watched struct {
	r    io.Reader
	done atomic.Bool
	late atomic.Int64
}

func (w *watched) Read(p []byte) (int, error) {
	if w.done.Load() {
		w.late.Add(1)
	}
	return w.r.Read(p)
}

func TestUploadCancelledOrRefusedStopsReading(t *testing.T) {
	for _, c := range []struct {
		name   string
		sized  bool
		refuse bool // the server answers 413 without reading
	}{{"cancel piped", false, false}, {"cancel sized", true, false}, {"refuse piped", false, true}, {"refuse sized", true, true}} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.refuse {
					writeJSON(w, 413, `{"error":{"message":"File too large","type":"invalid_request_error","code":null}}`)
					return
				}
				io.CopyN(io.Discard, r.Body, 1<<20)
				select { // a server that stalls
				case <-release:
				case <-r.Context().Done():
				}
			}))
			defer srv.Close()
			defer close(release)
			cl := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1"}
			in := &watched{r: newLines(200 << 20)}
			var r io.Reader = in
			if c.sized {
				r = sizedReader{in, 200 << 20}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if !c.refuse {
				time.AfterFunc(100*time.Millisecond, cancel)
			}
			start := time.Now()
			_, err := cl.Upload(ctx, "a.jsonl", r)
			in.done.Store(true)
			if c.refuse {
				if e, ok := AsError(err); !ok || e.Status != 413 || e.Outcome() != outcome.UpstreamRequestRejected || e.Retryable() {
					t.Fatalf("%v", err)
				}
			} else if !errors.Is(err, context.Canceled) {
				t.Fatalf("%v", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("returned after %s", d)
			}
			time.Sleep(50 * time.Millisecond)
			if n := in.late.Load(); n != 0 {
				t.Fatalf("input read %d times after Upload returned", n)
			}
		})
	}
}

type sizedReader struct {
	io.Reader
	n int
}

func (s sizedReader) Len() int { return s.n }

func TestContentStreamEndsWithItsContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"custom_id":"r0","response":{"status_code":200,"body":{}}}` + "\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1"}
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := c.Content(ctx, "file-1")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	n := 0
	time.AfterFunc(100*time.Millisecond, cancel)
	err = ReadResults(rc, 0, func(int, Result) error { n++; return nil })
	if n != 1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("%d lines, %v", n, err)
	}
}

func TestContentHeadersTimeOutAndAreRetried(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		io.WriteString(w, "ok\n")
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1", Timeout: 100 * time.Millisecond, Backoff: time.Millisecond}
	rc, err := c.Content(context.Background(), "file-1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "ok\n" || calls.Load() != 2 {
		t.Fatalf("%q after %d calls", b, calls.Load())
	}
	c.Retries = -1
	calls.Store(0)
	_, err = c.Content(context.Background(), "file-1")
	if e, ok := AsError(err); !ok || e.Outcome() != outcome.UpstreamTimeout || !e.Retryable() || calls.Load() != 1 {
		t.Fatalf("%v after %d calls", err, calls.Load())
	}
}

func TestRetryAfterLongerThanTheCapIsReturned(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	o.fail = func(r *http.Request) (int, string, http.Header, bool) {
		return 429, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`, http.Header{"Retry-After": {"3600"}}, true
	}
	_, err := c.Get(context.Background(), "batch_1")
	e, ok := AsError(err)
	if !ok || e.RetryAfter != time.Hour || e.Code != "rate_limit_exceeded" || e.Outcome() != outcome.UpstreamRateLimited || !e.Retryable() {
		t.Fatalf("%#v", err)
	}
	if n := o.hit("GET batch"); n != 1 {
		t.Fatalf("%d gets", n)
	}
}

func TestQuotaIsFinalAndNotRetried(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	o.fail = func(r *http.Request) (int, string, http.Header, bool) {
		return 429, `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}`, http.Header{"Retry-After": {"1"}}, true
	}
	_, err := c.Get(context.Background(), "batch_1")
	e, ok := AsError(err)
	if !ok || e.Retryable() || !e.Final() || e.Outcome() != outcome.UpstreamQuota || e.RetryAfter != 0 {
		t.Fatalf("%v", err)
	}
	if n := o.hit("GET batch"); n != 1 {
		t.Fatalf("%d gets", n)
	}
}

func TestGetRetriesADroppedConnection(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	// No connection is reused: net/http would send a GET again itself
	// when a kept-alive connection turns out closed.
	c.HTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var logs syncBuffer
	c.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := c.Create(context.Background(), "file-1")
	if err != nil {
		t.Fatal(err)
	}
	var dropped atomic.Bool
	o.fail = func(r *http.Request) (int, string, http.Header, bool) { return 0, "", nil, false }
	inner := srv.Config.Handler
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !dropped.Swap(true) {
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		inner.ServeHTTP(w, r)
	})
	got, err := c.Get(context.Background(), b.ID)
	if err != nil || got.ID != b.ID {
		t.Fatalf("%v", err)
	}
	if !strings.Contains(logs.String(), "retried") || strings.Contains(logs.String(), o.token) {
		t.Fatalf("log: %s", logs.String())
	}
}

func TestConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := &Client{Root: "http://user:pw-secret@" + addr + "/v1?api_key=key-secret", Token: "sk-x", Retries: -1}
	_, err = c.Create(context.Background(), "file-1")
	e, ok := AsError(err)
	if !ok || !e.Connect || !e.Retryable() || e.Outcome() != outcome.UpstreamFailed {
		t.Fatalf("%v", err)
	}
	if s := err.Error() + fmt.Sprint(errors.Unwrap(err)); strings.Contains(s, "pw-secret") || strings.Contains(s, "key-secret") {
		t.Fatalf("credential shown: %s", s)
	}
}

func TestPostIsNeverRedirectedGetIs(t *testing.T) {
	o, srv := newOpenAI(t)
	var moved atomic.Int64
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { moved.Add(1) }))
	defer elsewhere.Close()
	c := o.client(srv)
	o.fail = func(r *http.Request) (int, string, http.Header, bool) {
		if r.URL.Path == "/v1/batches" {
			return 307, `{}`, http.Header{"Location": {elsewhere.URL + "/v1/batches"}}, true
		}
		if r.URL.Path == "/v1/batches/batch_old" {
			return 302, `{}`, http.Header{"Location": {"/v1/batches/batch_1"}}, true
		}
		return 0, "", nil, false
	}
	_, err := c.Create(context.Background(), "file-1")
	if e, ok := AsError(err); !ok || e.Status != 307 || e.Outcome() != outcome.UpstreamEndpoint || moved.Load() != 0 {
		t.Fatalf("%v (moved %d)", err, moved.Load())
	}
	o.fail = nil
	if _, err := c.Create(context.Background(), "file-1"); err != nil {
		t.Fatal(err)
	}
	o.fail = func(r *http.Request) (int, string, http.Header, bool) {
		if r.URL.Path == "/v1/batches/batch_old" {
			return 302, `{}`, http.Header{"Location": {"/v1/batches/batch_1"}}, true
		}
		return 0, "", nil, false
	}
	if b, err := c.Get(context.Background(), "batch_old"); err != nil || b.ID != "batch_1" {
		t.Fatalf("%+v %v", b, err)
	}
}

func TestAnAnswerThatIsNotJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<html>captive portal secret-page</html>")
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1"}
	_, err := c.Get(context.Background(), "batch_1")
	e, ok := AsError(err)
	if !ok || e.Outcome() != outcome.UpstreamPayload || e.Retryable() || strings.Contains(err.Error(), "secret-page") {
		t.Fatalf("%v", err)
	}
	_, err = c.Upload(context.Background(), "a.jsonl", strings.NewReader("{}\n"))
	if e, ok := AsError(err); !ok || e.Outcome() != outcome.UpstreamPayload {
		t.Fatalf("%v", err)
	}
}

func TestErrorBodyIsSummarisedNotEchoed(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	long := strings.Repeat("very long message ", 100)
	o.fail = func(r *http.Request) (int, string, http.Header, bool) {
		return 400, `{"error":{"message":"line one\nline two with ` + o.token + ` and hf_abcdefghijklmnop ` + long + `","type":"invalid_request_error","param":"input_file_id","code":"invalid_file"},"debug":"INTERNAL-DUMP"}`,
			http.Header{"X-Request-Id": {"req_123"}}, true
	}
	_, err := c.Create(context.Background(), "file-1")
	e, ok := AsError(err)
	if !ok || e.Status != 400 || e.Code != "invalid_file" || e.Type != "invalid_request_error" || e.RequestID != "req_123" || e.Retryable() || e.Final() {
		t.Fatalf("%#v", err)
	}
	msg := err.Error()
	for _, bad := range []string{o.token, "hf_abcdefghijklmnop", "INTERNAL-DUMP", "\n"} {
		if strings.Contains(msg, bad) {
			t.Fatalf("%q in %q", bad, msg)
		}
	}
	if len([]rune(e.Reason)) > MaxMessage+1 || !strings.HasPrefix(e.Reason, "line one line two with REDACTED") {
		t.Fatalf("reason %q", e.Reason)
	}
}

func TestIDsThatAreNotIDsAreNeverSent(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	for _, id := range []string{"", ".", "..", "../files", "a/b", "a?b", "a#b", "a%2Fb", "a b", "a\nb", strings.Repeat("x", 300)} {
		_, err1 := c.Get(context.Background(), id)
		_, err2 := c.Cancel(context.Background(), id)
		_, err3 := c.Create(context.Background(), id)
		_, err4 := c.Content(context.Background(), id)
		for _, err := range []error{err1, err2, err3, err4} {
			if e, ok := AsError(err); !ok || e.Retryable() || !e.Final() {
				t.Errorf("%q: %v", id, err)
			}
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.hits) != 0 {
		t.Fatalf("sent: %v", o.hits)
	}
}

func TestAFailedBatchSaysWhy(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	b, err := c.Create(context.Background(), "file-1")
	if err != nil {
		t.Fatal(err)
	}
	o.set(b.ID, func(m map[string]any) {
		m["status"] = StatusFailed
		m["errors"] = map[string]any{"object": "list", "data": []map[string]any{{
			"code": "token_limit_exceeded", "line": nil, "param": nil,
			"message": "Enqueued token limit reached for gpt-4o-mini in organization org-x. Limit: 2,000,000 enqueued tokens. Please try again once some in_progress batches have been completed.",
		}, {"code": "invalid_json", "line": 7, "param": "body", "message": "Invalid JSON at line 7 " + o.token}}}
		m["usage"] = map[string]any{"input_tokens": 10, "output_tokens": 2, "total_tokens": 12,
			"input_tokens_details": map[string]int{"cached_tokens": 0}, "output_tokens_details": map[string]int{"reasoning_tokens": 0}}
		m["model"] = "gpt-4o-mini-2024-07-18"
	})
	b, err = c.Get(context.Background(), b.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !b.Ended() || !b.HasError(CodeTokenLimitExceeded) || len(b.Errors) != 2 || b.Errors[1].Line != 7 || b.Errors[1].Param != "body" ||
		strings.Contains(b.Errors[1].Message, o.token) || b.Usage != (Usage{10, 2, 12}) || b.Model != "gpt-4o-mini-2024-07-18" {
		t.Fatalf("%+v", b)
	}
}

func TestUnknownStatusIsKeptAndTold(t *testing.T) {
	o, srv := newOpenAI(t)
	c := o.client(srv)
	var logs syncBuffer
	c.Log = slog.New(slog.NewTextHandler(&logs, nil))
	b, _ := c.Create(context.Background(), "file-1")
	o.set(b.ID, func(m map[string]any) { m["status"] = "paused" })
	b, err := c.Get(context.Background(), b.ID)
	if err != nil || b.Status != "paused" || b.Ended() || !strings.Contains(logs.String(), "status=paused") {
		t.Fatalf("%+v %v %s", b, err, logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An id with characters a path escapes reaches the server as it is
// (escaped once, not twice).
func TestIDsAreEscapedOnce(t *testing.T) {
	var got atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.Path)
		writeJSON(w, 200, `{"id":"x","object":"batch","status":"completed"}`)
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1"}
	for _, id := range []string{"batch_abc", "b|{x}^`[]", "550e8400-e29b-41d4-a716-446655440000", "a:b@c"} {
		if _, err := c.Get(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if p := got.Load().(string); p != "/v1/batches/"+id {
			t.Errorf("%q reached the server as %q", id, p)
		}
	}
}
