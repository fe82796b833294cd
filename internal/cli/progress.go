package cli

import (
	"fmt"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/hfsent/hfsent/internal/engine"
)

// progress draws the bar on stderr; a nil *progress draws nothing.
type progress struct {
	mu    sync.Mutex
	bar   *progressbar.ProgressBar
	last  time.Time
	limit func() int // the adaptive limit, when --adaptive
}

// showLimit adds the adaptive concurrency limit to the description.
func (p *progress) showLimit(limit func() int) {
	if p != nil {
		p.limit = limit
	}
}

// newProgress draws a bar when the total is known (a regular file, counted
// before the run), else (stdin, a pipe) a spinner with the rows done and the
// rate; nothing unless show.
func newProgress(ios *IOStreams, show bool, total int64) *progress {
	if !show {
		return nil
	}
	return &progress{bar: newBar(ios, "classify", total)}
}

// newBar is the rows bar every command draws on stderr: a bar with an ETA
// when total is known, else (total < 0) a spinner with the rows done, the
// rate and the time spent.
func newBar(ios *IOStreams, desc string, total int64) *progressbar.ProgressBar {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(ios.ErrOut),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rows"),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionSetWidth(24),
		progressbar.OptionClearOnFinish(),
		// No colour codes ever, so NO_COLOR and plain terminals hold.
		progressbar.OptionEnableColorCodes(false),
	}
	if total < 0 {
		total = -1 // the spinner
		opts = append(opts,
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionSetElapsedTime(true),
			// The spinner turns on its own goroutine, which may only start
			// drawing after the first render: render the blank state now.
			progressbar.OptionSetRenderBlankState(true),
		)
	} else {
		opts = append(opts, progressbar.OptionSetPredictTime(true))
	}
	return progressbar.NewOptions64(total, opts...)
}

func (p *progress) update(s engine.Progress) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The count first: Describe draws at once, and a description drawn
	// before the count moved showed more rows ok than done (ok=48 next to
	// 40/340). Drawn this way, the description is never newer than the
	// count beside it.
	_ = p.bar.Set64(s.Written)
	// The description is rebuilt at most ten times a second: it is cheap,
	// but a million rows would otherwise format a million strings.
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond {
		p.last = now
		desc := fmt.Sprintf("ok=%d failed=%d active=%d", s.OK, s.Failed, s.Active)
		if p.limit != nil {
			desc += fmt.Sprintf(" limit=%d", p.limit())
		}
		p.bar.Describe(desc)
	}
}

func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.bar.Finish()
}
