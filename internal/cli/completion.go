package cli

import (
	"github.com/spf13/cobra"

	"github.com/hfsent/hfsent/internal/provider"
)

// registerCompletions adds value completion for flags with a fixed set of
// values; cobra's own `completion` command does the rest.
func registerCompletions(root *cobra.Command) {
	fixed := func(vals ...string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
			return vals, cobra.ShellCompDirectiveNoFileComp
		}
	}
	_ = root.RegisterFlagCompletionFunc("log-level", fixed("debug", "info", "warn", "error"))
	_ = root.RegisterFlagCompletionFunc("log-format", fixed("text", "json"))
	for _, c := range root.Commands() {
		if c.Flags().Lookup("fail-on") != nil {
			_ = c.RegisterFlagCompletionFunc("fail-on", fixed("any", "none", "1%", "5%"))
		}
		if c.Flags().Lookup("delimiter") != nil {
			_ = c.RegisterFlagCompletionFunc("delimiter", fixed(",", ";", "tab", "|"))
			_ = c.RegisterFlagCompletionFunc("encoding", fixed("utf-8", "utf-16", "utf-16le", "utf-16be", "windows-1252", "latin1", "iso-8859-15"))
		}
		if c.Flags().Lookup("provider") != nil {
			_ = c.RegisterFlagCompletionFunc("provider", fixed("hf", "local"))
		}
		if c.Flags().Lookup("constrain") != nil {
			_ = c.RegisterFlagCompletionFunc("constrain", fixed(provider.ConstrainNames...))
		}
		switch c.Name() {
		case "report":
			_ = c.MarkFlagFilename("output", "svg", "html")
		case "classify":
			_ = c.MarkFlagFilename("report", "svg", "html")
		}
	}
}
