package serve

import (
	"bufio"
	"encoding/json"
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
