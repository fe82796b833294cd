// Package tcpproxy is a TCP proxy a test or a benchmark controls, to cut
// or stall a server (PostgreSQL, shared by everything on the machine, is
// never stopped itself): SetDown closes every connection and refuses new
// ones, as a server that crashed would; SetStalled keeps connections but
// forwards nothing, as a server that stops answering would.
package tcpproxy

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards the connections it accepts to its target.
type Proxy struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	down    bool
	stalled bool
	conns   map[net.Conn]bool
}

// Start listens on a free port of 127.0.0.1 and forwards to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
	return p, nil
}

// Addr is the address it listens on.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening and cuts every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.SetStalled(false)
	p.SetDown(true)
}

// SetDown cuts every connection and refuses new ones, or forwards again.
func (p *Proxy) SetDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// SetStalled holds what the connections carry (new ones are accepted but
// forward nothing either) until SetStalled(false).
func (p *Proxy) SetStalled(stalled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = stalled
}

func (p *Proxy) isStalled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stalled
}

// track registers c, or reports false (and closes it) while down: a
// connection accepted or dialled as the proxy went down is not kept.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *Proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) pipe(c net.Conn) {
	if !p.track(c) {
		return
	}
	defer p.forget(c)
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(s) {
		return
	}
	defer p.forget(s)
	go func() { p.copy(s, c); s.Close(); c.Close() }()
	p.copy(c, s)
}

// copy forwards from src to dst, holding what it read while stalled.
func (p *Proxy) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.isStalled() {
			time.Sleep(5 * time.Millisecond)
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
