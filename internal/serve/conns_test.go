package serve

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// The requests net/http refuses by itself, before any handler (headers
// too large, a malformed request, an unknown transfer coding), are answered
// with the documented JSON error body, not net/http's text/plain. Headers
// over the limit are refused whatever their size.
func TestNetHTTPRefusalsAreJSON(t *testing.T) {
	h := start(t, &fakehf.Fake{})
	for _, c := range []struct {
		name, request string
		status        int
		code, message string
	}{
		{"headers just over 64 KiB", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n",
			431, CodeHeaderTooLarge, "request headers over 64 KiB"},
		{"headers of 1 MiB", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 1<<20) + "\r\n\r\n",
			431, CodeHeaderTooLarge, "request headers over 64 KiB"},
		{"no Host", "GET /healthz HTTP/1.1\r\n\r\n", 400, CodeBadRequest, "the request could not be parsed: missing required Host header"},
		{"not HTTP", "HELLO THERE\r\n\r\n", 400, CodeBadRequest, "the request could not be parsed"},
		{"a bad header name", "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n", 400, CodeBadRequest, "the request could not be parsed: invalid header name"},
		{"unknown transfer coding", "POST /v1/classify HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, CodeNotImplemented, "unsupported transfer encoding"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			// Written while the server may already answer: the answer
			// is read whatever part of the request it took.
			go func() { _, _ = io.WriteString(conn, c.request) }()
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("answer %d %q, want %d application/json:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), c.status, body)
			}
			var e errorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Detail.Code != c.code || e.Detail.Message != c.message {
				t.Fatalf("body %s (%v), want code %q message %q", body, err, c.code, c.message)
			}
		})
	}
	// Counted like any other answer, and the server still answers.
	if a := h.get(PathHealthz); a.status != http.StatusOK {
		t.Fatalf("/healthz %d", a.status)
	}
	if n := h.value(h.metrics(), "hfsent_http_requests_total", "route", "other", "code", "431"); n != 2 {
		t.Fatalf("hfsent_http_requests_total{code=431} = %v, want 2", n)
	}
}

// Only net/http's own refusals are rewritten: a handler's text/plain
// answer (/metrics), or one that looks like a refusal inside a body, passes
// as it is.
func TestOwnRefusalIsNarrow(t *testing.T) {
	for _, p := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nok",
		"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\nno",
		`{"x": "HTTP/1.1 400 Bad Request` + plainHeaders + `"}`,
		"HTTP/1.1 4",
	} {
		if _, _, ok := ownRefusal([]byte(p)); ok {
			t.Errorf("%q taken for net/http's own refusal", p)
		}
	}
	if st, msg, ok := ownRefusal([]byte("HTTP/1.1 400 Bad Request: missing required Host header" + plainHeaders + "400 Bad Request: missing required Host header")); !ok || st != 400 || msg != "400 Bad Request: missing required Host header" {
		t.Errorf("got %d %q %v", st, msg, ok)
	}
}

// rawRequest sends head (and no more) on a new connection and returns the
// connection and a reader of its answers.
func rawRequest(t *testing.T, addr, head string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	return conn, bufio.NewReader(conn)
}

// readAnswer reads one answer; it fails the test unless it comes within
// 5 s (the server's ReadTimeout is 30 s: an answer this soon was given
// without waiting for a body that never comes).
func readAnswer(t *testing.T, br *bufio.Reader) (*http.Response, []byte) {
	t.Helper()
	got := make(chan *http.Response, 1)
	var body []byte
	go func() {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			got <- nil
			return
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		got <- resp
	}()
	select {
	case resp := <-got:
		if resp == nil {
			t.Fatal("no answer")
		}
		return resp, body
	case <-time.After(5 * time.Second):
		t.Fatal("no answer within 5 s: the server waited for the body")
		return nil, nil
	}
}

// --body-budget: a request whose body does not fit in what the bodies
// being read and answered leave is answered 503 local_capacity with
// Retry-After at once, without its body being read (the test never sends
// it), and its connection closed; a body that could never fit is 413; once
// the bodies in the way are done, the budget is whole again.
func TestBodyBudget(t *testing.T) {
	const maxBody = 64 << 10
	h := start(t, &fakehf.Fake{}, func(s *setup) {
		s.cfg.MaxBody = maxBody
		s.cfg.BodyBudget = MinBodyBudget(maxBody) // room for one body of the largest size
	})
	head := func(n int) string {
		return fmt.Sprintf("POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", n)
	}
	// A body of the largest size, its first bytes sent, the rest held back.
	slow, slowBR := rawRequest(t, h.addr, head(maxBody)+`{"items": [`)
	waitFor(t, "the slow body to take its share", func() bool {
		return h.value(h.metrics(), "hfsent_body_budget_bytes") == float64(bodyCost(maxBody))
	})
	for _, c := range []struct{ name, head string }{
		{"a body of 1 KiB", head(1 << 10)},
		{"a chunked body (it may be --max-body)", "POST /feedback-sentiment HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, br := rawRequest(t, h.addr, c.head)
			resp, body := readAnswer(t, br)
			var e errorBody
			_ = json.Unmarshal(body, &e)
			if resp.StatusCode != 503 || e.Detail.Code != "local_capacity" || !strings.Contains(e.Detail.Message, "--body-budget") ||
				resp.Header.Get("Retry-After") == "" || !resp.Close {
				t.Fatalf("answer %d %v (Retry-After %q, close %v): %s", resp.StatusCode, e, resp.Header.Get("Retry-After"), resp.Close, body)
			}
		})
	}
	// The slow body ends: its request is answered, and the budget is whole.
	body := strings.Repeat(" ", maxBody-len(`{"items": [`)-len(`{"request_id": "s", "text": "fine"}]}`)) + `{"request_id": "s", "text": "fine"}]}`
	if _, err := io.WriteString(slow, body); err != nil {
		t.Fatal(err)
	}
	if resp, b := readAnswer(t, slowBR); resp.StatusCode != 200 {
		t.Fatalf("the slow request: %d %s", resp.StatusCode, b)
	}
	waitFor(t, "the budget given back", func() bool { return h.value(h.metrics(), "hfsent_body_budget_bytes") == 0 })
	if a := h.feedback("after", "fine"); a.status != 200 {
		t.Fatalf("after: %d %s", a.status, a.body)
	}
	if n := h.value(h.metrics(), "hfsent_body_budget_rejections_total"); n != 2 {
		t.Fatalf("hfsent_body_budget_rejections_total %v, want 2", n)
	}
}

// A body the budget could never hold (--body-budget set below what
// --max-body needs, which the command refuses) is 413 at once, unread.
func TestBodyThatCanNeverFit(t *testing.T) {
	h := start(t, &fakehf.Fake{}, func(s *setup) {
		s.cfg.MaxBody = 1 << 20
		s.cfg.BodyBudget = 1 << 20
	})
	_, br := rawRequest(t, h.addr, "POST /feedback-sentiment HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 500000\r\n\r\n")
	resp, body := readAnswer(t, br)
	if resp.StatusCode != 413 || !strings.Contains(string(body), "can never be read") {
		t.Fatalf("answer %d: %s", resp.StatusCode, body)
	}
	if a := h.feedback("small", "fine"); a.status != 200 {
		t.Fatalf("a small body: %d %s", a.status, a.body)
	}
}

// --max-conns: past it a new connection is answered 503 local_capacity
// with Retry-After at once, and closed; the connections already open are
// served, and a connection closed makes room.
func TestMaxConns(t *testing.T) {
	h := start(t, &fakehf.Fake{}, func(s *setup) { s.cfg.MaxConns = 3 })
	var open []net.Conn
	for range 3 { // three callers sending their headers slowly
		c, _ := rawRequest(t, h.addr, "GET /healthz HTTP/1.1\r\n")
		open = append(open, c)
	}
	time.Sleep(100 * time.Millisecond) // accepted
	_, br := rawRequest(t, h.addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, body := readAnswer(t, br)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "--max-conns (3)") || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("answer %d: %s", resp.StatusCode, body)
	}
	open[0].Close()
	waitFor(t, "room for a connection", func() bool {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			return false
		}
		defer c.Close()
		_, _ = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		return err == nil && resp.StatusCode == 200
	})
}
