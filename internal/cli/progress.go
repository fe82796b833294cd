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

func newProgress(ios *IOStreams, o *classifyOptions, total int64) *progress {
	show := ios.ErrTTY
	if o.progressSet {
		show = o.progress && !o.noProgress
	}
	if !show {
		return nil
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(ios.ErrOut),
		progressbar.OptionSetDescription("classify"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rows"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(24),
		progressbar.OptionClearOnFinish(),
		// No colour codes ever, so NO_COLOR and plain terminals hold.
		progressbar.OptionEnableColorCodes(false),
	)
	return &progress{bar: bar}
}

func (p *progress) update(s engine.Progress) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
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
	_ = p.bar.Set64(s.Written)
}

func (p *progress) finish() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.bar.Finish()
}
