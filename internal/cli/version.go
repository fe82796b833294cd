package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// buildInfo is the version, commit and date: those set with -ldflags -X by
// a release build, else what `go install module@version` recorded.
func buildInfo() (v, c, d string) {
	v, c, d = version, commit, date
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v, c, d
	}
	if v == "dev" && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version
	}
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && c == "none":
			c = s.Value
		case s.Key == "vcs.time" && d == "unknown":
			d = s.Value
		}
	}
	return v, c, d
}

func versionLine() string {
	v, c, d := buildInfo()
	return fmt.Sprintf("hfsent %s (commit %s, built %s, %s %s/%s)", v, c, d,
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd(ios *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date",
		Long: `Version prints the version, the commit and the build date set by the release
build, with the Go version and platform. hfsent --version prints the same.`,
		Example: `  hfsent version
  hfsent --version`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(ios.Out, versionLine())
			return err
		},
	}
}
