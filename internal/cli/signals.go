package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// stopSignals end a run gracefully: Ctrl-C, a service manager's SIGTERM,
// and SIGHUP (the terminal went away), which would otherwise kill the
// process without writing what it finished.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP}

// sameSignal is how close a repeat must follow the first signal to be the
// same one delivered twice: `timeout` and a kill of the process group send
// the signal both to the process and to its group.
const sameSignal = 100 * time.Millisecond

// watchSignals ends ctx on the first of sigs, after calling first; a
// second one (not the first one delivered twice: the same signal within
// sameSignal) calls second, which should end the process.
func watchSignals(parent context.Context, sigs []os.Signal, first func(os.Signal), second func()) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, sigs...)
	done := make(chan struct{})
	go func() {
		var at time.Time
		var got os.Signal
		select {
		case s := <-ch:
			at, got = time.Now(), s
			first(s)
			cancel()
		case <-done:
			return
		}
		for {
			select {
			case s := <-ch:
				if s == got && time.Since(at) < sameSignal {
					continue
				}
				second()
				return
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel()
	}
}

// interruptContext ends ctx on the first stop signal (a graceful stop); a
// second one freezes the results writer, so no row is torn (unless a write
// is stuck: freeze waits only so long, and says whether the last row is
// whole), and exits at once.
func interruptContext(parent context.Context, ios *IOStreams, log *slog.Logger, freeze func() bool) (context.Context, func()) {
	return watchSignals(parent, stopSignals, func(s os.Signal) {
		log.Warn("received "+s.String()+": no new rows, no call not yet sent; letting calls in flight finish (up to 10s); press Ctrl-C again to quit now", "signal", s.String())
	}, func() {
		msg := "hfsent: second interrupt: quitting now; the rows written so far are complete"
		if freeze != nil && !freeze() {
			msg = "hfsent: second interrupt: quitting now; a write was stuck, so the last row may be torn (--resume drops it)"
		}
		fmt.Fprintln(ios.ErrOut, msg)
		if ios.HardExit != nil {
			ios.HardExit(ExitInterrupted)
		}
	})
}
