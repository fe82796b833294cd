package provider

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// SendGate is a last check on a call, made as the request is written to
// its connection: for HTTP/1.1, before any byte of it reaches the
// connection. A caller that checked just before Classify
// (a queue row's lease) may have been stopped (SIGSTOP) between that check
// and the write; this one narrows the window to the write itself.
type SendGate struct {
	ok      func() bool
	refused atomic.Bool
}

// NewSendGate returns a gate that lets the call go while ok reports true.
func NewSendGate(ok func() bool) *SendGate { return &SendGate{ok: ok} }

// Refused reports whether the gate stopped the call: nothing was sent.
func (g *SendGate) Refused() bool { return g.refused.Load() }

type sendGateKey struct{}

// WithSendGate has the calls made under ctx pass g.
func WithSendGate(ctx context.Context, g *SendGate) context.Context {
	return context.WithValue(ctx, sendGateKey{}, g)
}

var errGateRefused = errors.New("not sent: the send gate refused the call")

// gatedConn is a connection of the shared client whose next write, the
// first of a request, asks the gate the request's trace put on it
// (GotConn), if any. HTTP/1.1 writes a request's headers and a small body
// in one write, after the transport took the connection.
type gatedConn struct {
	net.Conn
	g atomic.Pointer[SendGate]
}

func (c *gatedConn) Write(p []byte) (int, error) {
	if g := c.g.Swap(nil); g != nil && !g.ok() {
		g.refused.Store(true)
		return 0, errGateRefused
	}
	return c.Conn.Write(p)
}

// gated has req's first write ask the gate its context carries, if any: on
// an HTTP/1.1 connection of the shared client (an HTTP/2 one carries other
// calls' frames too, and is left as it is).
func gated(req *http.Request) *http.Request {
	g, _ := req.Context().Value(sendGateKey{}).(*SendGate)
	if g == nil {
		return req
	}
	var on *gatedConn
	trace := &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			conn := info.Conn
			if tc, ok := conn.(*tls.Conn); ok {
				if tc.ConnectionState().NegotiatedProtocol == "h2" {
					return
				}
				conn = tc.NetConn()
			}
			if gc, ok := conn.(*gatedConn); ok {
				on = gc
				gc.g.Store(g)
			}
		},
		// Called before the buffered request is flushed: only a request
		// that failed before its write takes its gate back, not to leave it
		// for the next request on the connection.
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if on != nil && info.Err != nil {
				on.g.CompareAndSwap(g, nil)
			}
		},
	}
	return req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
}
