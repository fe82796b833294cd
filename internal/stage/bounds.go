package stage

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Bounds of a provider's numeric settings. Each is wide enough for any
// real run and narrow enough that no value exhausts memory, overflows a
// computation or reaches a library that panics on it; the --help text of
// each flag shows its range.
const (
	MaxConcurrency = 4096
	MaxRetries     = 100
	MinRPS, MaxRPS = 0.001, 100_000
	MaxBurst       = 10_000
	MinThreshold   = 0.01
	MaxMinCalls    = 100_000
	MaxTPM         = 1_000_000_000
	// MaxPromptSize bounds a --prompt-file.
	MaxPromptSize = 64 << 10
	MaxPrice      = 1_000_000 // USD per million tokens

	MinTimeout        = time.Millisecond
	MaxTimeout        = time.Hour
	MaxConnectTimeout = 10 * time.Minute
	MaxRowDeadline    = 24 * time.Hour
	MaxAdmissionWait  = time.Hour
	MinBreakerWindow  = 100 * time.Millisecond
	MaxBreakerWindow  = 24 * time.Hour
	MaxCooldown       = 24 * time.Hour

	MaxBudgetCap     = 1_000_000
	MinBudgetLease   = 200 * time.Millisecond
	MaxBudgetLease   = time.Minute
	MinBudgetSafeFor = time.Second
	MaxBudgetSafeFor = time.Hour
)

// Number is what InRange checks; time.Duration is an int64.
type Number interface {
	~int | ~int64 | ~float64
}

// InRange checks a numeric setting against [lo, hi], so that every such
// message reads the same: "--batch-size must be between 1 and 1024, got
// 0". With off set, 0 is allowed too and means off (e.g. "no limit"). NaN
// and ±Inf are never in range.
func InRange[T Number](flag string, v, lo, hi T, off string) error {
	if off != "" && v == 0 {
		return nil
	}
	if v >= lo && v <= hi { // false for NaN
		return nil
	}
	want := "between " + Show(lo) + " and " + Show(hi)
	if off != "" {
		want = "0 (" + off + ") or " + want
	}
	return fmt.Errorf("%s must be %s, got %s", flag, want, Show(v))
}

// RangeHelp is the range as --help shows it, e.g. "1-1024".
func RangeHelp[T Number](lo, hi T) string { return Show(lo) + "-" + Show(hi) }

// Show is a bound as messages and help show it.
func Show[T Number](v T) string {
	switch x := any(v).(type) {
	case time.Duration:
		return ShortDuration(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// ShortDuration drops the zero units time.Duration prints: 1h, not 1h0m0s.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// refuse is an error when cond holds.
func refuse(cond bool, format string, args ...any) error {
	if cond {
		return fmt.Errorf(format, args...)
	}
	return nil
}

// first is the first error of errs, nil when there is none.
func first(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
