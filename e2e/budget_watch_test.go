package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// watchFrame is one line of budget status --watch --json.
type watchFrame struct {
	Cap         int    `json:"cap"`
	Unreachable string `json:"unreachable_since"`
	Error       string `json:"error"`
	ReadAt      string `json:"read_at"`
	at          time.Time
}

// budget status --watch through a proxy to PostgreSQL that is cut, then
// stalled (it holds every connection and forwards nothing): it keeps
// redrawing, the last status read under since when the database cannot be
// reached and why, and draws afresh once it answers again; SIGINT ends it,
// exit 0. Before, the cut ended it with a bare "unexpected EOF" (exit 1),
// and the stall froze it on its last frame.
func TestBudgetStatusWatchThroughDatabaseFaults(t *testing.T) {
	db, viaProxy, px := proxiedDB(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "budget", "status", "b", "--watch", "--json", "--interval", "100ms")
	cmd.Env = append(cmd.Env, qenv(viaProxy)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The same in text, beside it.
	text, textErr := hfsent(t, ctx, "budget", "status", "b", "--watch", "--interval", "100ms")
	text.Env = append(text.Env, qenv(viaProxy)...)
	var textOut lockedBuffer
	text.Stdout = &textOut
	if err := text.Start(); err != nil {
		t.Fatal(err)
	}
	frames := make(chan watchFrame, 1000)
	go func() {
		defer close(frames)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var f watchFrame
			if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
				t.Errorf("not a JSON line: %q", sc.Text())
				continue
			}
			f.at = time.Now()
			frames <- f
		}
	}()
	// next waits for a frame that ok accepts, failing after d.
	next := func(what string, d time.Duration, ok func(watchFrame) bool) watchFrame {
		t.Helper()
		deadline := time.After(d)
		for {
			select {
			case f, open := <-frames:
				if !open {
					_ = cmd.Wait()
					t.Fatalf("%s: budget status --watch ended, exit %d:\n%s", what, cmd.ProcessState.ExitCode(), stderr.String())
				}
				if ok(f) {
					return f
				}
			case <-deadline:
				t.Fatalf("%s: no such frame within %s\n%s", what, d, stderr.String())
			}
		}
	}
	healthy := func(f watchFrame) bool { return f.Cap == 3 && f.Unreachable == "" && f.Error == "" }
	next("at start", 10*time.Second, healthy)
	for start := time.Now(); !strings.Contains(textOut.String(), "budget b: cap=3"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no text frame within 10s\n%s", textErr.String())
		}
	}

	for _, fault := range []struct {
		name       string
		start, end func()
		says       string
	}{
		{"cut", func() { px.SetDown(true) }, func() { px.SetDown(false) }, ""},
		{"stalled", func() { px.SetStalled(true) }, func() { px.SetStalled(false) }, "no answer within 1s"},
	} {
		fault.start()
		began := time.Now()
		first := next(fault.name, 10*time.Second, func(f watchFrame) bool { return f.Unreachable != "" })
		since, err := time.Parse(time.RFC3339, first.Unreachable)
		if err != nil || since.Before(began.Add(-2*time.Second)) || first.Cap != 3 || first.ReadAt == "" || !strings.Contains(first.Error, fault.says) {
			t.Fatalf("%s: first frame %+v: want the last status (cap 3), read_at, unreachable_since about now, and why", fault.name, first)
		}
		// It goes on redrawing while the fault lasts, since the same time.
		for range 2 {
			f := next(fault.name+", later", 5*time.Second, func(watchFrame) bool { return true })
			if f.Unreachable != first.Unreachable {
				t.Fatalf("%s: frame %+v, want unreachable since %s", fault.name, f, first.Unreachable)
			}
		}
		fault.end()
		next(fault.name+", after", 15*time.Second, healthy)
	}

	// The text watcher draws a fresh frame too: after its last fault's
	// frame (which holds the last status read), another status.
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		s := textOut.String()
		if i := strings.LastIndex(s, "cannot reach"); i >= 0 && strings.Count(s[i:], "budget b: cap=3") >= 2 {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("the text watcher drew no fresh frame after the faults:\n%.2000s", s[max(0, len(s)-2000):])
		}
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = text.Process.Signal(syscall.SIGINT)
	for range frames {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("budget status --watch after SIGINT: %v\n%s", err, stderr.String())
	}
	if err := text.Wait(); err != nil {
		t.Fatalf("budget status --watch (text) after SIGINT: %v\n%s", err, textErr.String())
	}
	for _, want := range []string{"budget b: cannot reach the database since ", "the last status read, at ", "no answer within 1s", "budget b: cap=3"} {
		if !strings.Contains(textOut.String(), want) {
			t.Fatalf("the text frames never say %q:\n%.3000s", want, textOut.String())
		}
	}
}

// lockedBuffer is a bytes.Buffer a process writes to while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
