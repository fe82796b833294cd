package cli

import (
	"time"

	"github.com/hfsent/hfsent/internal/stage"
)

// Bounds of the numeric flags. Each is wide enough for any real run and
// narrow enough that no value exhausts memory, overflows a computation or
// reaches a library that panics on it; the --help text of each flag shows
// its range. The provider's are internal/stage's.
const (
	maxConcurrency = stage.MaxConcurrency
	maxBatchSize   = 1024
	// maxTextsInFlight bounds --concurrency × --batch-size: the engine keeps
	// a window of rows twice that size, allocated up front.
	maxTextsInFlight = 65536
	maxCharsLimit    = 1_000_000
	maxRetries       = stage.MaxRetries
	minRPS, maxRPS   = stage.MinRPS, stage.MaxRPS
	maxBurst         = stage.MaxBurst
	minThreshold     = stage.MinThreshold
	maxMinCalls      = stage.MaxMinCalls
	maxBars          = 100_000

	minTimeout        = stage.MinTimeout
	maxTimeout        = stage.MaxTimeout
	maxConnectTimeout = stage.MaxConnectTimeout
	maxRowDeadline    = stage.MaxRowDeadline
	maxAdmissionWait  = stage.MaxAdmissionWait
	minBreakerWindow  = stage.MinBreakerWindow
	maxBreakerWindow  = stage.MaxBreakerWindow
	maxCooldown       = stage.MaxCooldown
	maxRunDuration    = 365 * 24 * time.Hour
)

// inRange checks a numeric flag against [lo, hi] (stage.InRange): a usage
// error.
func inRange[T stage.Number](flag string, v, lo, hi T, off string) error {
	if err := stage.InRange(flag, v, lo, hi, off); err != nil {
		return usageError(err)
	}
	return nil
}

// rangeHelp is the range as --help shows it, e.g. "1-1024".
func rangeHelp[T stage.Number](lo, hi T) string { return stage.RangeHelp(lo, hi) }

func show[T stage.Number](v T) string { return stage.Show(v) }

// shortDuration drops the zero units time.Duration prints: 1h, not 1h0m0s.
func shortDuration(d time.Duration) string { return stage.ShortDuration(d) }

// textsInFlight refuses -c × --batch-size beyond maxTextsInFlight (classify,
// serve, worker).
func textsInFlight(conc, batch int) error {
	if conc*batch > maxTextsInFlight {
		return usageErrorf("--concurrency × --batch-size must be at most %d texts in flight, got %d × %d", maxTextsInFlight, conc, batch)
	}
	return nil
}

// contradict refuses a flag given together with its opposite.
func contradict(flag, noFlag string, both bool) error {
	if both {
		return usageErrorf("%s and %s contradict each other; give one", flag, noFlag)
	}
	return nil
}

// validBounds checks classify's own numeric flags and refuses flags that
// contradict each other.
func (o *classifyOptions) validBounds() error {
	for _, err := range []error{
		inRange("--max-chars", o.maxChars, 1, maxCharsLimit, ""),
		o.eng.validate(&o.prov),
		inRange("--max-duration", o.maxDuration, 0, maxRunDuration, ""),
		o.prog.validate(),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}
