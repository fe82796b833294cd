package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds of the numeric flags. Each is wide enough for any real run and
// narrow enough that no value exhausts memory, overflows a computation or
// reaches a library that panics on it; the --help text of each flag shows
// its range.
const (
	maxConcurrency = 4096
	maxBatchSize   = 1024
	// maxTextsInFlight bounds --concurrency × --batch-size: the engine keeps
	// a window of rows twice that size, allocated up front.
	maxTextsInFlight = 65536
	maxCharsLimit    = 1_000_000
	maxRetries       = 100
	minRPS, maxRPS   = 0.001, 100_000
	maxBurst         = 10_000
	minThreshold     = 0.01
	maxMinCalls      = 100_000
	maxBars          = 100_000

	minTimeout        = time.Millisecond
	maxTimeout        = time.Hour
	maxConnectTimeout = 10 * time.Minute
	maxRowDeadline    = 24 * time.Hour
	maxAdmissionWait  = time.Hour
	minBreakerWindow  = 100 * time.Millisecond
	maxBreakerWindow  = 24 * time.Hour
	maxCooldown       = 24 * time.Hour
	maxRunDuration    = 365 * 24 * time.Hour
)

// number is what inRange checks; time.Duration is an int64.
type number interface {
	~int | ~int64 | ~float64
}

// inRange checks a numeric flag against [lo, hi], so that every such
// message reads the same: "--batch-size must be between 1 and 1024, got 0".
// With off set, 0 is allowed too and means off (e.g. "no limit"). NaN and
// ±Inf are never in range.
func inRange[T number](flag string, v, lo, hi T, off string) error {
	if off != "" && v == 0 {
		return nil
	}
	if v >= lo && v <= hi { // false for NaN
		return nil
	}
	want := "between " + show(lo) + " and " + show(hi)
	if off != "" {
		want = "0 (" + off + ") or " + want
	}
	return usageErrorf("%s must be %s, got %s", flag, want, show(v))
}

// rangeHelp is the range as --help shows it, e.g. "1-1024".
func rangeHelp[T number](lo, hi T) string { return show(lo) + "-" + show(hi) }

func show[T number](v T) string {
	switch x := any(v).(type) {
	case time.Duration:
		return shortDuration(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// shortDuration drops the zero units time.Duration prints: 1h, not 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

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
