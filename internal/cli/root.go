// Package cli holds the hfsent commands: one file per command, each filling
// an options struct from flags and calling one run function with its I/O
// streams. Exit codes are decided in exit.go.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

// Build-time values, set with -ldflags "-X".
var (
	version = "dev"
	commit  = "none"
	date    = "unknown"
)

// Main runs hfsent with args and returns the process exit code.
func Main(args []string, ios *IOStreams) int { return mainContext(context.Background(), args, ios) }

// mainContext is Main under ctx: a test ends a command that runs until it
// is stopped (serve) by cancelling ctx, as SIGTERM would.
func mainContext(ctx context.Context, args []string, ios *IOStreams) int {
	root := newRootCmd(ios)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		var ee *exitError
		if !errors.As(err, &ee) || ee.err != nil {
			fmt.Fprintf(ios.ErrOut, "hfsent: %v\n", err)
		}
	}
	return exitCode(err)
}

type globalOptions struct {
	logLevel  string
	logFormat string
}

func newRootCmd(ios *IOStreams) *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:   "hfsent",
		Short: "Classify the text rows of a CSV with a Hugging Face model, as fast as the provider allows",
		Long: `hfsent sends the text rows of a CSV file to a Hugging Face text-classification
model (sentiment by default) and writes one result row per input row: status,
label, score and an outcome code. Concurrency bounds, timeouts, retries with
backoff, a circuit breaker and rate limits sit between the rows and the
provider, so a batch of thousands finishes instead of drowning in 429s.
hfsent serve answers the same over HTTP, with admission control.

Start offline, with no token:
  hfsent classify samples/feedback.csv --provider local -o results.csv

Logs go to stderr (--log-level, --log-format text|json); hfsent never writes
colour codes, so NO_COLOR and plain terminals need nothing.`,
		Example: `  hfsent check                                  # token, endpoint, answer shape
  hfsent classify feedback.csv -o results.csv --summary-json summary.json --fail-on 5%
  hfsent report results.csv -o run.html
  hfsent serve --addr 0.0.0.0:8000 -c 8            # an HTTP service
  source <(hfsent completion bash)              # shell completion`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.SetOut(ios.Out)
	root.SetErr(ios.ErrOut)
	root.SetIn(ios.In)
	root.SetVersionTemplate(versionLine() + "\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError(err) })
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level on stderr: debug, info, warn, error")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", "text", "log format on stderr: text or json (one object a line; durations in milliseconds, their keys ending in _ms)")

	root.AddCommand(newClassifyCmd(ios, g), newServeCmd(ios, g))
	root.AddCommand(newVersionCmd(ios))
	root.AddCommand(newReportCmd(ios), newCalibrateCmd(ios, g), newTuneCmd(ios, g), newCheckCmd(ios, g), newDocsCmd())
	root.AddCommand(newQueueCmd(ios, g), newWorkerCmd(ios, g), newBudgetCmd(ios, g), newCacheCmd(ios, g))
	registerCompletions(root)
	return root
}

// jsonDuration writes a duration in a JSON log as milliseconds, its key
// ending in _ms ("for_ms": 1000, as serve's "duration_ms"): slog's JSON
// handler writes nanoseconds under the bare key, which no reader expects.
// Text logs keep Go's form (for=1s).
func jsonDuration(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindDuration {
		return a
	}
	return slog.Float64(a.Key+"_ms", float64(a.Value.Duration().Microseconds())/1000)
}

// logger builds the stderr logger for a command.
func (g *globalOptions) logger(ios *IOStreams) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(g.logFormat) {
	case "text":
		return slog.New(slog.NewTextHandler(ios.ErrOut, opts)), nil
	case "json":
		opts.ReplaceAttr = jsonDuration
		return slog.New(slog.NewJSONHandler(ios.ErrOut, opts)), nil
	}
	return nil, usageErrorf("--log-format %q: want text or json", g.logFormat)
}
