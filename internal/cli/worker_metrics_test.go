package cli

import (
	"net"
	"strings"
	"testing"
)

// A --metrics-addr already taken is exit 2 naming the flag, before the
// database is even dialled (this one answers nothing) or any call sent.
func TestWorkerMetricsAddrBusy(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	r := runMain(t, map[string]string{"HF_TOKEN": token}, "", "worker", "--db", "postgres://hfsent@127.0.0.1:1/none",
		"--batch", "b", "--endpoint", "http://127.0.0.1:1/", "--metrics-addr", busy.Addr().String())
	if r.code != ExitUsage || !strings.Contains(r.stderr, "--metrics-addr "+busy.Addr().String()) {
		t.Fatalf("exit %d, want %d naming --metrics-addr: %s", r.code, ExitUsage, r.stderr)
	}
}
