package tcpproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo is a server that answers each line with itself.
func echo(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					c.Write([]byte(l))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, wait time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestDownCutsAndRefusesStalledHolds(t *testing.T) {
	p, err := Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if got, err := roundTrip(c, 2*time.Second); got != "ping\n" {
		t.Fatalf("through the proxy: %q %v", got, err)
	}
	p.SetStalled(true)
	if got, err := roundTrip(c, 200*time.Millisecond); err == nil {
		t.Fatalf("stalled, the proxy forwarded %q", got)
	}
	p.SetStalled(false)
	p.SetDown(true)
	if got, err := roundTrip(c, time.Second); err == nil {
		t.Fatalf("down, the old connection still answered %q", got)
	}
	d, err := net.Dial("tcp", p.Addr())
	if err == nil {
		if got, err := roundTrip(d, time.Second); err == nil {
			t.Fatalf("down, a new connection answered %q", got)
		}
		d.Close()
	}
	p.SetDown(false)
	e, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if got, err := roundTrip(e, 2*time.Second); got != "ping\n" {
		t.Fatalf("up again: %q %v", got, err)
	}
}
