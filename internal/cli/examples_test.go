package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// --examples-text-column and --examples-label-column read a labelled CSV
// whose columns have other names: its examples reach the prompt as those
// of a file with text and label columns do. A column that is not there is
// exit 2 before any call, naming the file and the flag.
func TestExamplesColumns(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a"))
	lf := writeFile(t, "labels.yaml", feedbackYAML)
	ex := writeFile(t, "reviews.csv", "review,sentiment\nThe boiler works again,positive\nThey never came,negative\n")
	env := map[string]string{"HF_TOKEN": "hf_x"}
	classify := func(more ...string) run {
		return runMain(t, env, "", append([]string{"classify", in, "-o", filepath.Join(t.TempDir(), "o.csv"), "--no-cache"},
			labelChatArgs(srv.URL, append([]string{"--labels-file", lf, "--examples", ex}, more...)...)...)...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, `--examples: ` + ex + `:1: header has no label column "label" (--examples-label-column) and no text column "text" (--examples-text-column); columns found: "review", "sentiment"`},
		{[]string{"--examples-text-column", "review"}, `--examples: ` + ex + `:1: header has no label column "label" (--examples-label-column`},
		{[]string{"--examples-text-column", "body", "--examples-label-column", "sentiment"}, `header has no text column "body" (--examples-text-column`},
	} {
		r := classify(c.args...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 with %q\n%s", c.args, r.code, c.want, r.stderr)
		}
	}
	if r := runMain(t, env, "", append([]string{"classify", in, "--no-cache"}, labelChatArgs(srv.URL, "--labels-file", lf, "--examples-label-column", "sentiment")...)...); r.code != ExitUsage || !strings.Contains(r.stderr, "need --examples FILE.csv") {
		t.Errorf("--examples-label-column without --examples: exit %d\n%s", r.code, r.stderr)
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls before the refusals", f.Calls())
	}
	if r := classify("--examples-text-column", "review", "--examples-label-column", "sentiment"); r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	var req struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	if err := json.Unmarshal(f.Bodies()[0], &req); err != nil || len(req.Messages) == 0 ||
		!strings.Contains(req.Messages[0].Content, `"The boiler works again"`) || !strings.Contains(req.Messages[0].Content, `"They never came"`) {
		t.Fatalf("the examples are not in the prompt: %s", f.Bodies()[0])
	}
}
