package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Codes of the refusals net/http answers by itself, before any handler.
const (
	CodeHeaderTooLarge = "request_header_too_large" // 431: headers over 64 KiB
	CodeNotImplemented = "not_implemented"          // 501: a transfer coding it does not know
)

// net/http answers a request it cannot read (headers over MaxHeaderBytes:
// 431; a malformed request line, header or Host: 400; an unknown transfer
// coding: 501) itself, with a text/plain body written straight to the
// connection in a single write, before any handler runs; no setting of
// http.Server changes that body. refusalConn recognises exactly those
// writes (the status line, then net/http's fixed headers) and answers the
// documented JSON error body instead, so that every error a caller gets
// has the same shape.
type refusalListener struct {
	net.Listener
	refused func(status int, code string, remote net.Addr)
}

func (l *refusalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &refusalConn{Conn: c, refused: l.refused}, nil
}

type refusalConn struct {
	net.Conn
	refused func(status int, code string, remote net.Addr)
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
	if c.refused != nil {
		c.refused(status, code, c.RemoteAddr())
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
