package batchapi

import (
	"context"
	"io"
	"sync/atomic"
	"time"
)

// watchdog cancels a call that has made no progress for a while: a stream
// that stalls (a provider that stops sending a download, or stops reading
// an upload) ends instead of hanging until the run's own context does.
type watchdog struct {
	t     *time.Timer
	d     atomic.Int64 // the wait, a time.Duration: set by the transport's goroutine
	fired atomic.Bool
}

func newWatchdog(d time.Duration, cancel context.CancelFunc) *watchdog {
	w := &watchdog{}
	w.d.Store(int64(d))
	w.t = time.AfterFunc(d, func() {
		w.fired.Store(true)
		cancel()
	})
	return w
}

// kick is progress: the wait starts again.
func (w *watchdog) kick() { w.t.Reset(w.wait()) }

// wait is how long the watchdog waits for progress.
func (w *watchdog) wait() time.Duration { return time.Duration(w.d.Load()) }

// waitFor makes the next wait d, from now.
func (w *watchdog) waitFor(d time.Duration) {
	w.d.Store(int64(d))
	w.t.Reset(d)
}

// stop ends the watch; it reports whether the watchdog had fired.
func (w *watchdog) stop() bool {
	w.t.Stop()
	return w.fired.Load()
}

// kicking is a request body that kicks its watchdog at each read, and
// gives it after instead once the body has been read whole (the provider
// then has the whole file to store before it answers).
type kicking struct {
	r     io.Reader
	dog   *watchdog
	after time.Duration
}

func (k *kicking) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if err == io.EOF {
		k.dog.waitFor(k.after)
	} else {
		k.dog.kick()
	}
	return n, err
}
