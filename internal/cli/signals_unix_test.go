//go:build unix

package cli

import (
	"context"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The same signal delivered twice at once (as `timeout` does, to the
// process and to its group) is one signal; a second one later, or another
// signal, is the second.
func TestWatchSignalsCountsADoubleDeliveryOnce(t *testing.T) {
	var firsts, seconds atomic.Int32
	ctx, stop := watchSignals(context.Background(), []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2},
		func(os.Signal) { firsts.Add(1) }, func() { seconds.Add(1) })
	defer stop()
	self := os.Getpid()
	_ = syscall.Kill(self, syscall.SIGUSR1)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the first signal did not end the context")
	}
	// The second copy, once the first was handled (two copies sent at once
	// may reach the process as one).
	_ = syscall.Kill(self, syscall.SIGUSR1)
	time.Sleep(30 * time.Millisecond)
	if firsts.Load() != 1 || seconds.Load() != 0 {
		t.Fatalf("first %d, second %d after one signal delivered twice; want 1 and 0", firsts.Load(), seconds.Load())
	}
	time.Sleep(sameSignal)
	_ = syscall.Kill(self, syscall.SIGUSR1)
	deadline := time.Now().Add(5 * time.Second)
	for seconds.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if seconds.Load() != 1 {
		t.Fatal("a repeat after the window was not the second signal")
	}
}

// Another signal right after the first is a second signal, however soon.
func TestWatchSignalsAnotherSignalIsTheSecond(t *testing.T) {
	var seconds atomic.Int32
	ctx, stop := watchSignals(context.Background(), []os.Signal{syscall.SIGUSR1, syscall.SIGUSR2},
		func(os.Signal) {}, func() { seconds.Add(1) })
	defer stop()
	_ = syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	<-ctx.Done()
	_ = syscall.Kill(os.Getpid(), syscall.SIGUSR2)
	deadline := time.Now().Add(5 * time.Second)
	for seconds.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if seconds.Load() != 1 {
		t.Fatal("SIGUSR2 right after SIGUSR1 was not taken as the second signal")
	}
}
