package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
)

// Codes of the refusals net/http answers by itself, before any handler.
const (
	CodeHeaderTooLarge = "request_header_too_large" // 431: headers over 64 KiB
	CodeNotImplemented = "not_implemented"          // 501: a transfer coding it does not know
)

// listener is what the server serves on: it bounds the connections open at
// once (Config.MaxConns), and rewrites net/http's own refusals.
//
// Every open connection costs memory whatever it sends: a caller sending
// 64 KiB of headers slowly holds about 128 KiB until ReadHeaderTimeout.
// Past MaxConns a new connection is answered 503 local_capacity at once
// (JSON, Retry-After) and closed, without a byte of it read.
//
// net/http answers a request it cannot read (headers over MaxHeaderBytes:
// 431; a malformed request line, header or Host: 400; an unknown transfer
// coding: 501) itself, with a text/plain body written straight to the
// connection in a single write, before any handler runs; no setting of
// http.Server changes that body. refusalConn recognises exactly those
// writes (the status line, then net/http's fixed headers) and answers the
// documented JSON error body instead, so that every error a caller gets
// has the same shape.
type listener struct {
	net.Listener
	max     int64 // 0: no bound
	open    atomic.Int64
	refused func(status int, code string, remote net.Addr)
	full    []byte // the answer past max
}

func newListener(ln net.Listener, max int, refused func(int, string, net.Addr)) *listener {
	body, _ := json.Marshal(errorBody{errorDetail{Code: string(outcome.LocalCapacity),
		Message: fmt.Sprintf("the server has as many connections open as --max-conns (%d) allows; try again after Retry-After", max)}})
	body = append(body, '\n')
	full := fmt.Sprintf("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	return &listener{Listener: ln, max: int64(max), refused: refused, full: []byte(full)}
}

// connMemory is what one open connection may hold: a caller's headers of
// up to 64 KiB, read into a buffer that grows by doubling.
const connMemory = 128 << 10

// baseMemory is what the process holds at rest (runtime, metrics, the
// dedupe cache of 65,536 answers, the reorder window), with room.
const baseMemory = 64 << 20

// MemoryLimit is the soft memory limit serve gives Go's runtime
// (debug.SetMemoryLimit) for a body budget and a bound on connections: what
// they may hold at once, twice the bodies' (their garbage, decoded once,
// waits for the collector), plus the base. Under it the collector runs as
// often as it must to stay below, rather than let the heap double.
func MemoryLimit(bodyBudget int64, maxConns int) int64 {
	return baseMemory + 2*bodyBudget + int64(maxConns)*connMemory
}

// lingerAfterRefusal is how long a connection turned away stays half-closed
// before it is closed: a caller still sending its request would otherwise
// get a reset instead of the answer (net/http waits as long).
const lingerAfterRefusal = 500 * time.Millisecond

func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.max > 0 && l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.turnAway(c)
			continue
		}
		return &refusalConn{Conn: c, l: l}, nil
	}
}

// turnAway answers c 503 and closes it, without reading from it or
// keeping a goroutine for it.
func (l *listener) turnAway(c net.Conn) {
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = c.Write(l.full)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	time.AfterFunc(lingerAfterRefusal, func() { c.Close() })
	if l.refused != nil {
		l.refused(http.StatusServiceUnavailable, string(outcome.LocalCapacity), c.RemoteAddr())
	}
}

type refusalConn struct {
	net.Conn
	l      *listener
	closed atomic.Bool
}

func (c *refusalConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
	}
	return c.Conn.Close()
}

// plainHeaders are what net/http writes after the status line of its own
// refusals (net/http's server.go, errorHeaders).
const plainHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

func (c *refusalConn) Write(p []byte) (int, error) {
	status, msg, ok := ownRefusal(p)
	if !ok {
		return c.Conn.Write(p)
	}
	code := CodeBadRequest
	switch status {
	case 431:
		code, msg = CodeHeaderTooLarge, fmt.Sprintf("request headers over %d KiB", maxHeaderBytes>>10)
	case 501:
		code, msg = CodeNotImplemented, "unsupported transfer encoding"
	default:
		// "400 Bad Request", or "400 Bad Request: missing required Host header".
		_, detail, _ := strings.Cut(msg, ": ")
		msg = "the request could not be parsed"
		if detail != "" {
			msg += ": " + detail
		}
	}
	body, _ := json.Marshal(errorBody{errorDetail{Code: code, Message: msg}})
	body = append(body, '\n')
	statusLine, _, _ := strings.Cut(string(p), "\r\n")
	reason, _, _ := strings.Cut(statusLine[len("HTTP/1.1 123 "):], ":")
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n", status, reason, len(body))
	b.Write(body)
	if _, err := c.Conn.Write(b.Bytes()); err != nil {
		return 0, err
	}
	if c.l.refused != nil {
		c.l.refused(status, code, c.RemoteAddr())
	}
	return len(p), nil
}

// CloseWrite lets net/http half-close the connection after a refusal, so
// that the caller reads the answer before the connection goes.
func (c *refusalConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ownRefusal reports whether p is one of net/http's own refusals, and its
// status and text ("Bad Request: missing required Host header"): never
// anything the caller sent. It is cheap on every other write.
func ownRefusal(p []byte) (status int, text string, ok bool) {
	rest, found := bytes.CutPrefix(p, []byte("HTTP/1.1 "))
	if !found || len(rest) < 4 || (rest[0] != '4' && rest[0] != '5') || rest[3] != ' ' {
		return 0, "", false
	}
	status, err := strconv.Atoi(string(rest[:3]))
	if err != nil {
		return 0, "", false
	}
	i := bytes.Index(rest, []byte(plainHeaders))
	if i < 0 || bytes.Contains(rest[:i], []byte("\r\n")) {
		return 0, "", false
	}
	return status, string(rest[i+len(plainHeaders):]), true
}
