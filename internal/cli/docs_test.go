package cli

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/ from the commands")

// docs/ holds the Markdown reference generated from the commands; this test
// fails when a flag or a help text changed and docs/ was not regenerated.
func TestDocsAreCurrent(t *testing.T) {
	committed := filepath.Join("..", "..", "docs")
	dir := t.TempDir()
	if *updateDocs {
		dir = committed
	}
	if code, _, stderr := ciRun(t, nil, "docs", dir); code != ExitOK {
		t.Fatalf("docs: exit %d\n%s", code, stderr)
	}
	if *updateDocs {
		return
	}
	fresh, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	old, _ := filepath.Glob(filepath.Join(committed, "*.md"))
	names := func(paths []string) []string {
		var n []string
		for _, p := range paths {
			n = append(n, filepath.Base(p))
		}
		return n
	}
	const fix = "docs/ is stale: run `go generate ./cmd/hfsent` (or go test ./internal/cli -run TestDocsAreCurrent -update) and commit docs/"
	if !slices.Equal(names(fresh), names(old)) {
		t.Fatalf("%s\ngenerated: %v\ncommitted: %v", fix, names(fresh), names(old))
	}
	for _, p := range fresh {
		want, _ := os.ReadFile(filepath.Join(committed, filepath.Base(p)))
		got, _ := os.ReadFile(p)
		if string(got) != string(want) {
			t.Errorf("%s: %s differs", fix, filepath.Base(p))
		}
	}
	for _, cmd := range []string{"hfsent_classify.md", "hfsent_serve.md", "hfsent_report.md", "hfsent_check.md", "hfsent_completion_bash.md"} {
		if !slices.Contains(names(fresh), cmd) {
			t.Errorf("no %s in the reference", cmd)
		}
	}
}

// Every command a user can run has examples in its help.
func TestHelpHasExamples(t *testing.T) {
	root := newRootCmd(&IOStreams{})
	root.InitDefaultCompletionCmd()
	for _, c := range append(root.Commands(), root) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			continue // cobra's completion has per-shell instructions instead
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("hfsent %s has no examples in --help", c.Name())
		}
	}
}

func TestCompletion(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash": "__start_hfsent", "zsh": "#compdef hfsent", "fish": "complete -c hfsent", "powershell": "Register-ArgumentCompleter",
	} {
		code, out, stderr := ciRun(t, nil, "completion", shell)
		if code != ExitOK || !strings.Contains(out, marker) {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", shell, code, len(out), stderr)
		}
	}
	// Flag values complete too.
	_, out, _ := ciRun(t, nil, "__complete", "classify", "x.csv", "--fail-on", "")
	if !strings.Contains(out, "any\nnone\n") {
		t.Errorf("--fail-on values do not complete:\n%s", out)
	}
}
