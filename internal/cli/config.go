package cli

import (
	"errors"
	"log/slog"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/stage"
)

// addConfigFlag adds --config (classify, serve, worker).
func addConfigFlag(fs *pflag.FlagSet, v *string) {
	fs.StringVar(v, "config", "", "a YAML file of flags by their long names (model: ..., concurrency: 8, labels: [a, b]); a flag given on the command line wins (docs/guides/cascade.md#the-config-file)")
}

// withConfig sets, from the --config file path (if any), every flag of
// cmd the command line did not set (stage.ApplyConfig), then runs run with
// the logger the flags ask for; a usage error about a flag the file set
// names the file's line.
func withConfig(cmd *cobra.Command, ios *IOStreams, g *globalOptions, path string, run func(*slog.Logger) error) error {
	fs := cmd.Flags()
	logged := func() error {
		log, err := g.logger(ios)
		if err != nil {
			return err
		}
		return run(log)
	}
	if path == "" {
		return logged()
	}
	data, err := stage.ReadFile("--config", path)
	if err != nil {
		return usageError(err)
	}
	origins, err := stage.ApplyConfig(path, data, fs)
	if err != nil {
		return usageError(err)
	}
	err = logged()
	var ee *exitError
	if errors.As(err, &ee) && ee.code == ExitUsage && ee.err != nil && !stage.IsFileError(ee.err) {
		ee.err = origins.Wrap(ee.err)
	}
	return err
}
