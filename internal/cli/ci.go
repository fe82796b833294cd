package cli

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/outcome"
)

// ciSummary is the part of --summary-json that CI pipelines act on.
type ciSummary struct {
	// CallsPerSec is the achieved provider rate: calls sent (retries
	// included) per second of the run.
	CallsPerSec float64 `json:"calls_per_s"`
	FailedRows  int64   `json:"failed_rows"`
	FailureRate float64 `json:"failure_rate"`
	FailOn      string  `json:"fail_on"`
	// ExitReason says why the exit code is what it is: ok,
	// failures_tolerated, rows_failed, failure_rate_exceeded, interrupted,
	// input_error or write_error.
	ExitReason string `json:"exit_reason"`
}

func newCISummary(s engine.Summary, v verdict) ciSummary {
	return ciSummary{CallsPerSec: s.Provider.CallsPerSec, FailedRows: v.Failed, FailureRate: v.FailureRate, FailOn: v.FailOn, ExitReason: v.Reason}
}

// writeStepSummary appends a Markdown table of outcomes to the file named by
// GITHUB_STEP_SUMMARY, which GitHub Actions shows on the run's page. Outside
// Actions the variable is unset and nothing happens.
func writeStepSummary(ios *IOStreams, log *slog.Logger, title string, s engine.Summary, v verdict) {
	path := ios.getenv("GITHUB_STEP_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.WriteString(stepSummary(title, s, v))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		log.Error("cannot write GITHUB_STEP_SUMMARY", "path", path, "err", unwrapPathError(err))
	}
}

func stepSummary(title string, s engine.Summary, v verdict) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", mdEscape(title))
	b.WriteString("| outcome | rows | share |\n|---|---:|---:|\n")
	for _, c := range outcome.All() {
		n := s.Counts[c]
		if n == 0 && c != outcome.Success {
			continue
		}
		share := 0.0
		if s.Rows > 0 {
			share = float64(n) / float64(s.Rows) * 100
		}
		fmt.Fprintf(&b, "| `%s` | %d | %.1f%% |\n", c, n, share)
	}
	fmt.Fprintf(&b, "| **total** | **%d** | |\n\n", s.Rows)
	ci := newCISummary(s, v)
	fmt.Fprintf(&b, "calls %d, retries %d, elapsed %s, %.1f calls/s. ", s.Provider.Calls, s.Provider.Retries, s.Elapsed.Round(time.Millisecond), ci.CallsPerSec)
	fmt.Fprintf(&b, "Exit %d (`%s`; failure rate %.1f%%, `--fail-on %s`).", v.Code, v.Reason, v.FailureRate*100, v.FailOn)
	if s.Stop != engine.StopNone {
		fmt.Fprintf(&b, " Stopped early: %s.", s.Stop)
	}
	b.WriteString("\n\n")
	return b.String()
}

// mdEscape keeps a file name from breaking the Markdown heading.
func mdEscape(s string) string {
	return strings.NewReplacer("\n", " ", "\r", " ", "|", `\|`, "*", `\*`, "_", `\_`, "`", "'", "<", "&lt;", ">", "&gt;", "[", `\[`).Replace(s)
}
