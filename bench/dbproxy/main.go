// Command dbproxy is a TCP proxy to PostgreSQL that a benchmark can cut,
// as a database that crashed would be: SIGUSR1 closes every connection and
// refuses new ones, SIGUSR2 forwards again. bench/budget_outage.sh uses it
// (PostgreSQL itself is shared and is never stopped).
package main

import (
	"flag"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

type proxy struct {
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func main() {
	target := flag.String("target", "127.0.0.1:5432", "PostgreSQL's address")
	addrFile := flag.String("addr-file", "", "write the bound address to this file once listening")
	flag.Parse()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	p := &proxy{target: *target, conns: map[net.Conn]bool{}}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for s := range sig {
			p.setDown(s == syscall.SIGUSR1)
		}
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go p.serve(c)
	}
}

// setDown cuts every connection and refuses new ones, or forwards again.
func (p *proxy) setDown(down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = down
	if down {
		for c := range p.conns {
			c.Close()
		}
	}
}

// track registers c, or reports false (and closes it) while down.
func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *proxy) forget(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *proxy) serve(c net.Conn) {
	if !p.track(c) {
		return
	}
	defer p.forget(c)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.forget(up)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}
