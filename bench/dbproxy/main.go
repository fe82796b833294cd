// Command dbproxy is a TCP proxy to PostgreSQL that a benchmark can cut,
// as a database that crashed would be: SIGUSR1 closes every connection and
// refuses new ones, SIGUSR2 forwards again. bench/budget_outage.sh uses it
// (PostgreSQL itself is shared and is never stopped). It is the proxy the
// e2e tests cut the database with (internal/tcpproxy).
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/hfsent/hfsent/internal/tcpproxy"
)

func main() {
	target := flag.String("target", "127.0.0.1:5432", "PostgreSQL's address")
	addrFile := flag.String("addr-file", "", "write the bound address to this file once listening")
	flag.Parse()
	p, err := tcpproxy.Start(*target)
	if err != nil {
		log.Fatal(err)
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(p.Addr()), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGTERM, syscall.SIGINT)
	for s := range sig {
		switch s {
		case syscall.SIGUSR1, syscall.SIGUSR2:
			p.SetDown(s == syscall.SIGUSR1)
		default:
			p.Close()
			return
		}
	}
}
