package cli

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newDocsCmd writes the Markdown reference in docs/ (go generate runs it; a
// test fails when the committed copy is stale). Hidden: it is for the
// project, not for users.
func newDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "docs DIR",
		Short:  "Write the Markdown command reference to DIR",
		Hidden: true,
		Example: `  hfsent docs docs/
  go generate ./cmd/hfsent`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return writeDocs(cmd.Root(), args[0])
		},
	}
}

func writeDocs(root *cobra.Command, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usageErrorf("cannot create %s: %v", dir, unwrapPathError(err))
	}
	// No "Auto generated on DATE" footer: the files must not change unless
	// the commands do.
	root.DisableAutoGenTag = true
	root.InitDefaultCompletionCmd()
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return usageErrorf("cannot write docs to %s: %v", dir, err)
	}
	return nil
}
