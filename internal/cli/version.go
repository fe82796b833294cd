package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func versionLine() string {
	return fmt.Sprintf("hfsent %s (commit %s, built %s, %s %s/%s)", version, commit, date,
		runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCmd(ios *IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and build date",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(ios.Out, versionLine())
			return err
		},
	}
}
