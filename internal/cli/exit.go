package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/outcome"
)

// Exit codes, as the README defines them. This file is the one place that turns
// errors into them.
const (
	ExitOK         = 0
	ExitRowsFailed = 1
	ExitUsage      = 2
	// ExitQuality: every row ended as --fail-on allows, but the answers
	// fell short of --min-accuracy or --min-macro-f1 against the gold
	// labels. Any other code wins over it (1 when rows failed).
	ExitQuality     = 3
	ExitInterrupted = 130
)

// exitError carries an exit code up to Main. A nil err means the message was
// already printed (or there is none).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a usage or input error found before any call: exit 2.
func usageErrorf(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

func usageError(err error) error { return &exitError{code: ExitUsage, err: err} }

// silentExit ends with code after the command has reported for itself.
func silentExit(code int) error {
	if code == ExitOK {
		return nil
	}
	return &exitError{code: code}
}

// exitCode maps what a command returned to the process exit code.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// Anything else reaching here is a flag or argument error from cobra.
	return ExitUsage
}

// ExitCheckFailed is check's answer when a batch would not work.
const ExitCheckFailed = 1

// ExitServeFailed is serve's exit when it could not go on serving (the
// listener failed); a drain after SIGTERM or SIGINT exits ExitOK.
const ExitServeFailed = 1

// failPolicy is --fail-on: which row outcomes make a classify run exit 1.
// any: a single row that is not success or fallback (the default); a rate
// such as 5%: more than that share of rows failed; none: row outcomes never
// do (interrupts, input and write errors still do).
type failPolicy struct {
	none bool
	rate float64 // fraction in [0,1]; used when set
	set  bool    // a rate was given
}

func (p *failPolicy) String() string {
	switch {
	case p.none:
		return "none"
	case p.set:
		return strconv.FormatFloat(p.rate*100, 'f', -1, 64) + "%"
	}
	return "any"
}

func (p *failPolicy) Set(v string) error {
	v = strings.TrimSpace(strings.ToLower(v))
	switch v {
	case "any":
		*p = failPolicy{}
		return nil
	case "none":
		*p = failPolicy{none: true}
		return nil
	}
	num, ok := strings.CutSuffix(v, "%")
	f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if !ok || err != nil || math.IsNaN(f) || f < 0 || f > 100 {
		return fmt.Errorf("want any, none, or a failure rate between 0%% and 100%%, such as 5%%")
	}
	*p = failPolicy{rate: f / 100, set: true}
	return nil
}

func (p *failPolicy) Type() string { return "any|none|RATE%" }

// verdict is how a classify run ends and why.
type verdict struct {
	Code        int
	Reason      string // stable, for scripts: see exitReasons
	Failed      int64  // rows that ended other than success or fallback
	FailureRate float64
	FailOn      string
	// QualityShort says which quality gate fell short (exit 3).
	QualityShort string
}

// Exit reasons written to --summary-json.
const (
	reasonOK           = "ok"                    // every row success or fallback
	reasonTolerated    = "failures_tolerated"    // some failed, within --fail-on
	reasonRowsFailed   = "rows_failed"           // --fail-on any and some row failed
	reasonRateExceeded = "failure_rate_exceeded" // above the --fail-on rate
	reasonInterrupted  = "interrupted"
	reasonInputError   = "input_error"
	reasonWriteError   = "write_error"
	reasonProviderStop = "provider_stopped" // token, credits, model or connection: nothing could succeed
	reasonMaxSpend     = "max_spend"        // --max-spend stopped the sending
	reasonQuality      = "quality_below"    // --min-accuracy or --min-macro-f1 fell short
)

// gateQuality turns a run that would exit 0 into exit 3 when its answers
// fell short of a quality gate (short says which, "" when none): every
// other code stands, 1 for failed rows included.
func gateQuality(v verdict, short string) verdict {
	if short != "" && v.Code == ExitOK {
		v.Code, v.Reason, v.QualityShort = ExitQuality, reasonQuality, short
	}
	return v
}

// judge applies the policy to a run that was neither interrupted nor broken.
func (p failPolicy) judge(sum engine.Summary) verdict {
	v := verdict{Failed: sum.Rows - sum.Counts[outcome.Success] - sum.Counts[outcome.Fallback], FailOn: p.String()}
	if sum.Rows > 0 {
		v.FailureRate = float64(v.Failed) / float64(sum.Rows)
	}
	switch {
	case sum.OK():
		v.Code, v.Reason = ExitOK, reasonOK
	case p.none:
		v.Code, v.Reason = ExitOK, reasonTolerated
	case p.set && v.FailureRate <= p.rate:
		v.Code, v.Reason = ExitOK, reasonTolerated
	case p.set:
		v.Code, v.Reason = ExitRowsFailed, reasonRateExceeded
	default:
		v.Code, v.Reason = ExitRowsFailed, reasonRowsFailed
	}
	return v
}
