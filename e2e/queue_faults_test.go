package e2e

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// faultRuns is how many times TestQueueCapThroughKillAndStop repeats its
// scenario: HFSENT_QUEUE_FAULT_RUNS, 30 by default. The excess it looks for
// came in 4 of 12 runs on the main it was found on, so 30 runs miss it with
// a chance below 1 in 100,000.
func faultRuns(t *testing.T) int {
	t.Helper()
	s := os.Getenv("HFSENT_QUEUE_FAULT_RUNS")
	if s == "" {
		return 30
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("HFSENT_QUEUE_FAULT_RUNS=%q: want a whole number of runs", s)
	}
	return n
}

// The global cap holds through a worker killed with -9 and another stopped
// past its lease, both in one run: three workers of -c 4 and --lease 2s
// under --global-cap 6, 360 rows at 50 ms; worker C is stopped (SIGSTOP) at
// 1 s and continued at 4 s, worker B killed at 1.5 s. The count is the fake
// provider's own (the most requests its handler held at once), every run;
// every row must end once, success. Stopped for 3 s with a lease of 2 s, C
// wakes with rows it claimed, reserved or was about to swap in, whose leases
// the database has since given to A: it must not send them.
func TestQueueCapThroughKillAndStop(t *testing.T) {
	db := pgtest.URL(t)
	runs := faultRuns(t)
	over, full := 0, 0
	for i := range runs {
		peak := capThroughKillAndStop(t, db, fmt.Sprintf("b%d", i))
		t.Logf("run %d: the provider's peak in flight %d", i, peak)
		if peak > 6 {
			over++
		}
		if peak == 6 {
			full++
		}
	}
	if over > 0 {
		t.Fatalf("in %d of %d runs the provider saw more than 6 calls at once; the global cap is 6", over, runs)
	}
	if full == 0 {
		t.Fatalf("no run reached the cap of 6 calls at once: the cap was not tested")
	}
}

// capThroughKillAndStop runs the scenario once on batch and returns the
// provider's peak of calls in flight, having checked that each row ended
// once, success.
func capThroughKillAndStop(t *testing.T, db, batch string) int64 {
	t.Helper()
	fake := &fakehf.Fake{Latency: 50 * time.Millisecond, NoRecord: true}
	srv := fakehf.Start(fake)
	defer srv.Close()
	// Texts of the run's own, and no response cache: an answer cached by
	// an earlier run would hide calls from the count.
	rows := clientRows(batch, 360)
	pushBatch(t, db, batch, rows, "--global-cap", "6")
	args := []string{"--batch", batch, "--endpoint", srv.URL, "-c", "4", "--lease", "2s", "--exit-when-done", "--no-cache", "--log-level", "warn"}
	a, b, c := startWorker(t, db, args...), startWorker(t, db, args...), startWorker(t, db, args...)
	t0 := time.Now()
	waitInFlight(t, fake, 1, a)
	signalAt(t, c, t0.Add(time.Second), syscall.SIGSTOP)
	signalAt(t, b, t0.Add(1500*time.Millisecond), syscall.SIGKILL)
	signalAt(t, c, t0.Add(4*time.Second), syscall.SIGCONT)
	b.wait(t)
	for _, w := range []*worker{a, c} {
		if code := w.wait(t); code != 0 {
			t.Fatalf("batch %s: worker exit %d\n%s", batch, code, w.stderr.String())
		}
	}
	checkOnceEach(t, exportRows(t, db, batch), idsOf(rows))
	return fake.MaxInFlight()
}

// signalAt sends sig to w at the time given.
func signalAt(t *testing.T, w *worker, at time.Time, sig syscall.Signal) {
	t.Helper()
	time.Sleep(time.Until(at))
	if err := w.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("sending %v: %v", sig, err)
	}
}
