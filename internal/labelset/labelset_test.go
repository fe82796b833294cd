package labelset

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/provider"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func mustLoad(t *testing.T, path string) *Set {
	t.Helper()
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The example, in full: every field lands where it belongs, the
// examples outside the labels joining their label's after its own.
func TestParseYAML(t *testing.T) {
	s := mustLoad(t, "testdata/feedback.yaml")
	want := &Set{
		File: "testdata/feedback.yaml",
		Task: "Classify customer feedback on home repair visits by how the customer feels.",
		Labels: []Label{
			{Name: "positive", Description: "The customer is glad of the service, even mildly.", Line: 4, Examples: []Example{
				{Text: "Came on time and fixed the boiler in an hour.", Line: 7},
				{Text: "Fine, I suppose.", Reason: "mild, but glad", Line: 8},
			}},
			{Name: "negative", Description: "The customer is unhappy with the visit: lateness, a fault left unfixed,\nrudeness, or the bill.", Line: 10, Examples: []Example{
				{Text: `The engineer said "two hours" and came at six.`, Reason: "lateness", Line: 15},
				{Text: "Cheaper than last year, and a mess left behind.", Reason: "the mess outweighs the price", Line: 22},
			}},
			{Name: "neutral", Description: "A question or a fact, with no feeling about the service.", Line: 17, Examples: []Example{
				{Text: "Which day can the engineer come?", Line: 20},
			}},
		},
		None: []Example{{Text: "My cat likes the new radiator.", Line: 25}},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("got  %+v\nwant %+v", s, want)
	}
}

// withoutLines is s with the lines and the file name cleared, to compare
// sets read from different files.
func withoutLines(s *Set) *Set {
	c := s.clone()
	c.File = ""
	for i := range c.Labels {
		c.Labels[i].Line = 0
		for j := range c.Labels[i].Examples {
			c.Labels[i].Examples[j].Line = 0
		}
	}
	for j := range c.None {
		c.None[j].Line = 0
	}
	return c
}

// The CSV form of the same file (it has no task) is the same set, with the
// same digest.
func TestParseCSVIsTheSameSet(t *testing.T) {
	y := mustLoad(t, "testdata/feedback.yaml")
	y.Task = ""
	c := mustLoad(t, "testdata/feedback.csv")
	if got, want := withoutLines(c), withoutLines(y); !reflect.DeepEqual(got, want) {
		t.Errorf("CSV %+v\nYAML %+v", got, want)
	}
	if c.Digest() != y.Digest() {
		t.Errorf("digests differ: %s %s", c.Digest(), y.Digest())
	}
	if c.Labels[1].Line != 4 || c.Labels[1].Examples[0].Line != 5 || c.None[0].Line != 9 {
		t.Errorf("lines: label %d, example %d, none %d; want 4, 5, 9", c.Labels[1].Line, c.Labels[1].Examples[0].Line, c.None[0].Line)
	}
}

// A semicolon-separated CSV with a BOM and CRLF line ends reads the same.
func TestParseCSVDelimiterAndBOM(t *testing.T) {
	data := "\uFEFFname;description;\r\npositive;glad;\r\nnegative;\"sad, \"\"very\"\"\";\r\n"
	s, err := ParseCSV("l.csv", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !reflect.DeepEqual(got, []string{"positive", "negative"}) || s.Labels[1].Description != `sad, "very"` {
		t.Errorf("got %+v", s)
	}
}

// Each problem a label file can have is refused with an *Error naming the
// file and the line (and, where there is one, the key).
func TestParseErrorsNameTheLine(t *testing.T) {
	long := strings.Repeat("x", provider.MaxLabelLen+1)
	many := "labels:\n"
	for i := range provider.MaxLabels + 1 {
		many += "  - l" + strings.Repeat("i", i) + "\n"
	}
	for _, c := range []struct {
		name, data string
		line       int
		key, msg   string
	}{
		{"syntax.yaml", "labels:\n  - a\n  - b\n bad: [\n", 4, "", "not valid YAML"},
		{"unclosed.yaml", "labels: [a, b\n", 2, "", "not valid YAML"},
		{"scanner.yaml", "labels: [a, b]\n\ntask: a: b\n", 3, "", "mapping values are not allowed"},
		{"parser.yaml", "task: t\nlabels:\n  - a\n  - b\n x\n", 5, "", "did not find expected key"},
		{"firstline.yaml", "labels: [a, b}\n", 1, "", "did not find expected ',' or ']'"},
		{"quote.yaml", "labels: [a, b]\ntask: \"unterminated\n", 2, "", "found unexpected end of stream"},
		{"anchor.yaml", "labels: [a, b]\ntask: *nope\n", 2, "", "unknown anchor 'nope' referenced"},
		{"tab.yaml", "labels:\n\t- a\n", 2, "", "not valid YAML"},
		{"noname.yaml", "labels:\n  - name: a\n  - description: no name\n", 3, "name", "a label without a name"},
		{"blankname.yaml", "labels:\n  - name: a\n  - name: \"  \"\n", 3, "name", "a label without a name"},
		{"dup.yaml", "labels:\n  - name: Billing\n  - name: other\n  - name: ' billing '\n", 4, "name", `labels "Billing" and "billing" are the same label (the first at line 2)`},
		{"dupquote.yaml", "labels:\n  - '\"bug\"'\n  - bug\n", 3, "name", "same label"},
		{"noexample.yaml", "labels: [a, b]\nexamples:\n  - text: hi\n    label: c\n", 4, "label", `names label "c", which is none of the labels (a, b)`},
		{"unknown.yaml", "labels:\n  - name: a\n    descripton: typo\n  - b\n", 3, "descripton", `unknown key "descripton" in a label: want name, description, examples`},
		{"unknowntop.yaml", "label: [a, b]\n", 1, "label", `unknown key "label" in the label file`},
		{"unknownex.yaml", "labels:\n  - name: a\n    examples:\n      - text: x\n        label: a\n  - b\n", 5, "label", `unknown key "label" in an example`},
		{"twice.yaml", "task: a\nlabels: [a, b]\ntask: b\n", 3, "task", `key "task" given twice in the label file (first at line 1)`},
		{"one.yaml", "task: t\nlabels:\n  - only\n", 2, "labels", "has 1 label(s): want 2 to 100"},
		{"none.yaml", "task: t\n", 1, "labels", "has no labels"},
		{"many.yaml", many, provider.MaxLabels + 2, "labels", "label 101 of 101: a label set has at most 100 labels"},
		{"long.yaml", "labels: [a, " + long + "]\n", 1, "name", "longer than 100 characters"},
		{"hidden.yaml", "labels: [a, \"b\\u200bc\"]\n", 1, "name", "U+200B"},
		{"alias.yaml", "labels:\n  - &x a\n  - *x\n", 2, "", "anchor or alias"},
		{"twodocs.yaml", "labels: [a, b]\n---\nlabels: [c, d]\n", 2, "", "a second YAML document"},
		{"empty.yaml", "", 1, "", "empty"},
		{"comment.yaml", "# nothing\n", 1, "", "empty"},
		{"kind.yaml", "labels: a, b\n", 1, "labels", `labels is the text "a, b": want a list`},
		{"notmap.yaml", "- a\n- b\n", 1, "", "the label file is a list: want a mapping"},
		{"utf8.yaml", "labels:\n  - a\n  - \xff\n", 3, "", "not UTF-8"},
		{"control.yaml", "labels:\n  - a\n  - b\x01\n", 3, "", "U+0001"},
		{"controlesc.yaml", "task: \"a\\x01\"\nlabels: [a, b]\n", 1, "task", "control character U+0001"},
		{"blankex.yaml", "labels:\n  - name: a\n    examples:\n      - ''\n  - b\n", 4, "example", "blank"},
		{"notext.yaml", "labels: [a, b]\nexamples:\n  - reason: why\n", 3, "text", "an example without text"},
		{"longex.yaml", "labels:\n  - name: a\n    examples: [" + strings.Repeat("y", MaxExampleChars+1) + "]\n  - b\n", 3, "example", "over 2000"},
		{"csvsyntax.csv", "name,description\na,\"x\"y\nb,z\n", 2, "", "cannot parse CSV"},
		{"csvnoname.csv", "name,description\na,x\n,orphan\nb,y\n", 3, "name", "a description without a label name"},
		{"csvdup.csv", "name\nbug\nother\nBUG\n", 4, "name", `labels "bug" and "BUG" are the same label (the first at line 2)`},
		{"csvdesc.csv", "name,description\na,one\nb,x\na,two\n", 4, "description", `label "a" has another description at line 2`},
		{"csvunknown.csv", "name,descripton\na,x\n", 1, "descripton", `unknown column "descripton"`},
		{"csvtwice.csv", "name,name\na,b\n", 1, "name", "given twice"},
		{"csvnonamecol.csv", "description,example\nx,y\n", 1, "name", "no column name"},
		{"csvunnamed.csv", "name,,description,\na,,x,\nb,,y, z\n", 3, "", "column 4 has no name in the header, but a value here"},
		{"csvwide.csv", "name,example\na,x\nb,y,z\n", 3, "", "3 fields, the header 2"},
		{"csvreason.csv", "name,example,reason\na,,why\nb,x,\n", 2, "reason", "a reason without an example"},
		{"csvone.csv", "name\nonly\n", 1, "labels", "has 1 label(s)"},
		{"csvempty.csv", "", 1, "", "empty"},
		{"csvutf8.csv", "name\na\n\xfe\n", 3, "", "not UTF-8"},
		{"csvcontrol.csv", "name,example\na,\"x\ry\"\nb,z\n", 2, "example", "control character U+000D"},
		{"csvmultiline.csv", "name,example\na,\"one\ntwo\"\nb,\"x\ny\n\nz\x01\"\n", 4, "example", "U+0001"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.name, []byte(c.data))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %v (%T), want an *Error", err, err)
			}
			if e.File != c.name || e.Line != c.line || e.Key != c.key || !strings.Contains(e.Msg, c.msg) {
				t.Errorf("got %q (line %d, key %q), want line %d, key %q, holding %q", err, e.Line, e.Key, c.line, c.key, c.msg)
			}
			if prefix := c.name + ":"; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("%q does not start with %q", err, prefix)
			}
		})
	}
}

// Only the size of a file is refused without a line: it is refused before
// it is parsed.
func TestFileTooLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	big := "labels: [a, b]\n#" + strings.Repeat("x", MaxFileBytes) + "\n"
	if err := os.WriteFile(path, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "over 524288 bytes") {
		t.Errorf("got %v", err)
	}
	if _, err := ParseCSV("big.csv", []byte("name\n"+strings.Repeat("a\n", MaxFileBytes))); err == nil || !strings.Contains(err.Error(), "over") {
		t.Errorf("CSV: got %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml: cannot read the label file: no such file") {
		t.Errorf("missing: got %v", err)
	}
}

// Names follow --labels' rule because they are judged by the same
// function: what it takes is taken (a name that is the probe's label, "a"
// or "A", among them), what it refuses is refused.
func TestNamesFollowTheLabelsRule(t *testing.T) {
	for _, names := range [][]string{{"a", "b"}, {"A", "b"}, {"b", "a"}, {"a", "B"}, {"café", "日本"}} {
		if _, err := ParseYAML("ok.yaml", []byte("labels: ["+strings.Join(names, ", ")+"]\n")); err != nil {
			t.Errorf("%v: %v", names, err)
		}
		if err := provider.CheckLabels(names); err != nil {
			t.Errorf("CheckLabels(%v): %v", names, err)
		}
	}
	for _, names := range [][]string{{"a", "A"}, {"ok", "x\u202ey"}, {"ok", strings.Repeat("z", 101)}} {
		s := &Set{File: "f", Labels: []Label{{Name: names[0], Line: 1}, {Name: names[1], Line: 2}}}
		if err, want := s.checkLabels(1), provider.CheckLabels(names); err == nil || want == nil || !strings.Contains(err.Error(), want.Error()) {
			t.Errorf("%q: got %v, want it to hold %v", names, err, want)
		}
	}
}

func TestIndex(t *testing.T) {
	s, err := FromNames([]string{"Positive", "negative", "A"})
	if err != nil {
		t.Fatal(err)
	}
	for cell, want := range map[string]int{"Positive": 0, "positive": 0, " POSITIVE ": 0, "'negative'": 1, "a": 2, "neutral": -1, "": -1, "x\u200b": -1} {
		if got := s.Index(cell); got != want {
			t.Errorf("Index(%q) = %d, want %d", cell, got, want)
		}
	}
	if _, err := FromNames([]string{"a"}); err == nil {
		t.Error("FromNames took one label")
	}
}

// Everything in the set changes the digest; the file it came from, its
// comments and the lines do not.
func TestDigest(t *testing.T) {
	base := mustLoad(t, "testdata/feedback.yaml")
	d := base.Digest()
	if len(d) != 64 {
		t.Fatalf("digest %q", d)
	}
	same := withoutLines(base)
	same.File = "elsewhere.yaml"
	if same.Digest() != d {
		t.Error("lines or the file's name changed the digest")
	}
	for name, change := range map[string]func(s *Set){
		"task":          func(s *Set) { s.Task += "." },
		"name":          func(s *Set) { s.Labels[0].Name = "Positive" },
		"description":   func(s *Set) { s.Labels[1].Description += " " },
		"example":       func(s *Set) { s.Labels[0].Examples[0].Text += "!" },
		"reason":        func(s *Set) { s.Labels[0].Examples[1].Reason = "" },
		"example moved": func(s *Set) { s.Labels[2].Examples = append(s.Labels[2].Examples, s.Labels[0].Examples[1]) },
		"order":         func(s *Set) { s.Labels[0], s.Labels[1] = s.Labels[1], s.Labels[0] },
		"none":          func(s *Set) { s.None = nil },
		"none to label": func(s *Set) { s.Labels[2].Examples = append(s.Labels[2].Examples, s.None...); s.None = nil },
		"boundaries":    func(s *Set) { s.Task, s.Labels[0].Name = "", s.Task+s.Labels[0].Name },
	} {
		c := base.clone()
		change(c)
		if c.Digest() == d {
			t.Errorf("%s: digest unchanged", name)
		}
	}
	if base.Digest() != d {
		t.Error("a change to a clone changed the original")
	}
}
