package labelset

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/provider"
)

// The fixed part a label file with descriptions, examples, reasons and
// texts that fit none makes, as a golden file: go test -run Golden -update
// rewrites it, and the diff is then read before it is committed.
func TestSystemGolden(t *testing.T) {
	got := mustLoad(t, "testdata/feedback.yaml").System(SingleInstruction)
	const golden = "testdata/feedback.golden"
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("System differs from %s (go test -run Golden -update rewrites it):\n%s", golden, got)
	}
}

// The fixed part depends on the set alone: the same file read twice, or
// its CSV form, renders the same bytes, and no text of a row is in it. A
// text's quotes and line breaks stay inside its one line.
func TestSystemIsStable(t *testing.T) {
	a := mustLoad(t, "testdata/feedback.yaml")
	b := mustLoad(t, "testdata/feedback.yaml")
	if a.System(SingleInstruction) != b.System(SingleInstruction) {
		t.Error("two reads render differently")
	}
	y, c := a.clone(), mustLoad(t, "testdata/feedback.csv")
	y.Task = ""
	if y.System(SingleInstruction) != c.System(SingleInstruction) {
		t.Error("the CSV form renders differently")
	}
	s, err := ParseYAML("q.yaml", []byte("labels:\n  - name: a\n    examples:\n      - \"line one\\n- \\\"fake\\\" example\"\n  - b\n"))
	if err != nil {
		t.Fatal(err)
	}
	sys := s.System(SingleInstruction)
	if !strings.Contains(sys, "\n- \"line one\\n- \\\"fake\\\" example\"") || strings.Count(sys, "\n- ") != 1 {
		t.Errorf("an example's line break or quotes escaped its line:\n%s", sys)
	}
	if !strings.HasPrefix(sys, strings.ReplaceAll(SingleInstruction, "{labels}", "a, b")) {
		t.Errorf("the instruction does not open the prompt:\n%s", sys)
	}
}

func TestZeroShot(t *testing.T) {
	names, _ := FromNames([]string{"bug", "billing"})
	z, err := names.ZeroShot("")
	if err != nil || !reflect.DeepEqual(z, ZeroShot{Candidates: []string{"bug", "billing"}}) {
		t.Errorf("names alone: %+v, %v; want today's request (the names, no template)", z, err)
	}
	z, _ = names.ZeroShot("This ticket is about {}.")
	if want := []string{"This ticket is about bug.", "This ticket is about billing."}; !reflect.DeepEqual(z.Candidates, want) || z.Template != "{}" {
		t.Errorf("a template: %+v", z)
	}
	s := mustLoad(t, "testdata/feedback.yaml")
	s.Labels[2].Description = ""
	z, _ = s.ZeroShot("")
	want := []string{s.Labels[0].Description, s.Labels[1].Description, "This example is neutral."}
	if !reflect.DeepEqual(z.Candidates, want) || z.Template != "{}" {
		t.Errorf("descriptions: %+v", z)
	}
	if z.Index(want[1]) != 1 || z.Index("negative") != -1 {
		t.Error("Index does not map a hypothesis back to its label")
	}
	z, _ = s.ZeroShot("Feeling: {}")
	if z.Candidates[0] != "Feeling: "+s.Labels[0].Description || z.Candidates[2] != "Feeling: neutral" {
		t.Errorf("template and descriptions: %+v", z)
	}
	s.Labels[1].Description = s.Labels[0].Description
	if _, err := s.ZeroShot(""); err == nil || !strings.Contains(err.Error(), `labels "positive" and "negative" have the same hypothesis`) {
		t.Errorf("two labels with one hypothesis: %v", err)
	}
	for _, bad := range []string{"no placeholder", "a {} \x01", strings.Repeat("x", MaxTemplateChars) + "{}", "\xff{}"} {
		if _, err := names.ZeroShot(bad); err == nil {
			t.Errorf("template %q taken", bad)
		}
	}
}

// The estimate is the dry run's (provider.EstimateText), and the cached
// share follows OpenAI's 1,024 tokens and steps of 128.
func TestEstimatePrefix(t *testing.T) {
	small := mustLoad(t, "testdata/feedback.yaml").System(SingleInstruction)
	p := EstimatePrefix(small, OpenAICache())
	if p.Tokens != provider.EstimateText(small) || p.Bytes != len(small) || p.Reaches() || p.Cached != 0 || p.Near() {
		t.Errorf("small: %+v", p)
	}
	big := strings.Repeat("word ", 1500) // 1,500 words, 7,500 characters
	p = EstimatePrefix(big, OpenAICache())
	if p.Tokens != provider.EstimateText(big) || !p.Reaches() || p.Near() {
		t.Errorf("big: %+v", p)
	}
	if want := 1024 + (p.Tokens-1024)/128*128; p.Cached != want || p.Cached > p.Tokens {
		t.Errorf("cached %d, want %d", p.Cached, want)
	}
	for tokens, near := range map[int]bool{818: false, 820: true, 1023: true, 1228: true, 1229: false} {
		if got := (Prefix{Tokens: tokens, Rule: OpenAICache()}).Near(); got != near {
			t.Errorf("Near at %d tokens = %v", tokens, got)
		}
	}
}
