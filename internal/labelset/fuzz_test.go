package labelset

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/provider"
)

// checkParsed holds for whatever a parser returns: an error is an *Error
// naming the file and a line within it (only a file over the size bound is
// refused without one); a set holds 2 to 100 labels --labels would take,
// and renders within MaxSystemBytes, the same bytes and digest each time.
func checkParsed(t *testing.T, name string, data []byte, parse func(string, []byte) (*Set, error)) {
	s, err := parse(name, data)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) || e.File != name {
			t.Fatalf("%v (%T) is not an *Error naming %s", err, err, name)
		}
		lines := bytes.Count(data, []byte("\n")) + bytes.Count(data, []byte("\r")) + 1
		if (e.Line < 1 && len(data) <= MaxFileBytes) || e.Line > lines {
			t.Fatalf("%q: line %d, the file has %d", err, e.Line, lines)
		}
		return
	}
	if err := provider.CheckLabels(s.Names()); err != nil {
		t.Fatalf("labels %q taken, but --labels refuses them: %v", s.Names(), err)
	}
	sys := s.System(SingleInstruction)
	if len(sys) > MaxSystemBytes {
		t.Fatalf("fixed part of %d bytes", len(sys))
	}
	again, err := parse(name, data)
	if err != nil || again.System(SingleInstruction) != sys || again.Digest() != s.Digest() {
		t.Fatalf("a second parse differs: %v", err)
	}
}

func seeds(f *testing.F, paths ...string) {
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

func FuzzParseYAML(f *testing.F) {
	seeds(f, "testdata/feedback.yaml")
	for _, s := range []string{
		"labels: [a, b]\n", "labels:\n  - &x a\n  - *x\n", "labels: [a, b]\n---\n", "task: [\n",
		"labels:\n  - name: a\n    examples: [x, {text: y, reason: z}]\n  - b\nexamples:\n  - {text: q, label: A}\n  - r\n",
		"labels: !!binary aGVsbG8=\n", "labels: [a, !!int x]\n", "{labels: [a, b], task: *u}\n", "labels: [a, b]\r\ntask: |\r\n  x\r\n",
		"%YAML 1.2\n---\nlabels: [a, b]\n", "labels: [a, b] # c\n\ttask: x\n", "? [a]\n: b\n", "labels: [\"\\u200b\", b]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParsed(t, "f.yaml", data, ParseYAML)
	})
}

func FuzzParseCSV(f *testing.F) {
	seeds(f, "testdata/feedback.csv")
	for _, s := range []string{
		"name\na\nb\n", "name;description\r\na;x\r\nb;y\r\n", "name,example,reason\na,x,y\n,z,\nb,,\n", "name,\"de\nscription\"\na,b\n",
		"\uFEFFname\ta\n", "name\n\"a\n", "name,name\n", ",\n,\n", "name\n\xff\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkParsed(t, "f.csv", data, ParseCSV)
	})
}

// Whatever the examples file holds, ReadExamples ends with an error or a
// set of at most k examples more a label, never a panic.
func FuzzReadExamples(f *testing.F) {
	seeds(f, "testdata/examples.csv")
	f.Add([]byte("text;label\nx;A\ny;b\n"))
	f.Add([]byte("label,text\n\"\",\"\"\n"))
	base, err := FromNames([]string{"a", "b"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, _, err := ReadExamples(bytes.NewReader(data), base, ExamplesOptions{Input: input.Options{Name: "e.csv", TextColumn: "text"}, LabelColumn: "label", PerLabel: 2})
		if err != nil {
			if !strings.HasPrefix(err.Error(), "e.csv") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, l := range s.Labels {
			if len(l.Examples) > 2 {
				t.Fatalf("%d examples of %s", len(l.Examples), l.Name)
			}
		}
	})
}
