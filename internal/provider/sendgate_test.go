package provider

import (
	"context"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// A call whose send gate says no as the transport writes it never reaches
// the provider: not a byte of it (the fake counts requests as they come).
func TestSendGateStopsTheWrite(t *testing.T) {
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	cls, err := NewHF(HFConfig{Endpoint: srv.URL, Concurrency: 1, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, open := range []bool{true, false} {
		g := NewSendGate(func() bool { return open })
		_, err := cls.Classify(WithSendGate(context.Background(), g), Call{Texts: []string{"fine"}})
		if open && (err != nil || g.Refused() || fake.Calls() != 1) {
			t.Fatalf("open gate: %v, refused %v, %d calls; want the call sent", err, g.Refused(), fake.Calls())
		}
		if !open && (err == nil || !g.Refused() || fake.Calls() != 1) {
			t.Fatalf("closed gate: %v, refused %v, %d calls in all; want it refused, unsent", err, g.Refused(), fake.Calls())
		}
	}
}
