package labelset

import (
	"crypto/sha256"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/input"
)

func readExamples(t *testing.T, path string, s *Set, k int) (*Set, ExamplesRead, error) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return ReadExamples(f, s, ExamplesOptions{Input: input.Options{Name: path, TextColumn: "text"}, LabelColumn: "label", TextFlag: "--text-column", LabelFlag: "--gold-column", PerLabel: k})
}

// byHash is what ReadExamples must choose, worked out here another way:
// every usable text of each label, distinct, sorted by its SHA-256 in hex,
// the first k.
func byHash(t *testing.T, path string, s *Set, k int) [][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := make([][]string, len(s.Labels))
	for _, r := range recs[1:] {
		text, label := r[0], strings.Trim(strings.ToLower(strings.TrimSpace(r[1])), "'")
		i := slices.Index(s.Names(), label)
		if i < 0 || strings.TrimSpace(text) == "" || len([]rune(text)) > MaxExampleChars || slices.Contains(want[i], text) {
			continue
		}
		if slices.ContainsFunc(s.Labels[i].Examples, func(e Example) bool { return e.Text == text }) {
			continue
		}
		want[i] = append(want[i], text)
	}
	for i := range want {
		slices.SortFunc(want[i], func(a, b string) int {
			ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
			return strings.Compare(string(ha[:]), string(hb[:]))
		})
		want[i] = want[i][:min(k, len(want[i]))]
	}
	return want
}

// The examples chosen are the k texts of each label with the smallest
// hash, after the label file's own, whatever the file's order, delimiter
// or line ends; the rows skipped are counted.
func TestReadExamplesChoosesByHash(t *testing.T) {
	base := mustLoad(t, "testdata/feedback.yaml")
	const k = 3
	got, st, err := readExamples(t, "testdata/examples.csv", base, k)
	if err != nil {
		t.Fatal(err)
	}
	want := byHash(t, "testdata/examples.csv", base, k)
	// The file's first rows are not the choice, so the test tells the two
	// rules apart.
	if first := []string{"Lovely job, thank you.", "The plumber was polite and quick.", "Boiler works again, great."}; reflect.DeepEqual(want[0], first) {
		t.Fatal("the hash's choice is the first rows: pick other texts")
	}
	for i, l := range got.Labels {
		own := len(base.Labels[i].Examples)
		if !reflect.DeepEqual(l.Examples[:own], base.Labels[i].Examples) {
			t.Errorf("%s: the label file's examples are not first", l.Name)
		}
		var texts []string
		for _, e := range l.Examples[own:] {
			texts = append(texts, e.Text)
		}
		if !reflect.DeepEqual(texts, want[i]) {
			t.Errorf("%s: chose %q, want %q", l.Name, texts, want[i])
		}
	}
	wantSt := ExamplesRead{Rows: 27, Unlabelled: 1, Skipped: 2, Chosen: 8, Fewer: []string{"neutral"}}
	if !reflect.DeepEqual(st, wantSt) {
		t.Errorf("read %+v, want %+v", st, wantSt)
	}
	if len(base.Labels[0].Examples) != 2 {
		t.Error("ReadExamples changed the set it was given")
	}

	// The same rows reversed, separated by semicolons, with LF line ends.
	f, _ := os.Open("testdata/examples.csv")
	recs, _ := csv.NewReader(f).ReadAll()
	f.Close()
	slices.Reverse(recs[1:])
	path := filepath.Join(t.TempDir(), "reversed.csv")
	out, _ := os.Create(path)
	w := csv.NewWriter(out)
	w.Comma = ';'
	w.WriteAll(recs)
	out.Close()
	again, _, err := readExamples(t, path, base, k)
	if err != nil {
		t.Fatal(err)
	}
	if again.System(SingleInstruction) != got.System(SingleInstruction) || again.Digest() != got.Digest() {
		t.Error("the same rows in another order gave another prompt")
	}
	if got.Digest() == base.Digest() {
		t.Error("the examples added left the digest as it was")
	}
}

func TestReadExamplesRefuses(t *testing.T) {
	base := mustLoad(t, "testdata/feedback.yaml")
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, data string
		line       int
		msg        string
	}{
		{"unknown.csv", "text,label\nfine,positive\nmeh,mixed\n", 3, `label "mixed" (column "label") is none of the labels (positive, negative, neutral)`},
		{"nolabel.csv", "text,gold\nfine,positive\n", 1, `header has no label column "label" (--gold-column)`},
		{"notext.csv", "body,label\nfine,positive\n", 1, "text column \"text\" (--text-column"},
		{"quote.csv", "text,label\nfine,positive\n\"open,negative\n", 3, "a quote opened at line 3 is never closed"},
		{"empty.csv", "", 0, "is empty"},
	} {
		_, _, err := readExamples(t, write(c.name, c.data), base, 2)
		var ie *input.Error
		if !errors.As(err, &ie) || ie.Line != c.line || !strings.Contains(ie.Msg, c.msg) || strings.Contains(ie.Msg, "--id-column") {
			t.Errorf("%s: got %v, want line %d holding %q", c.name, err, c.line, c.msg)
		}
	}
	for _, k := range []int{0, -1, MaxPerLabel + 1} {
		if _, _, err := readExamples(t, "testdata/examples.csv", base, k); err == nil {
			t.Errorf("%d examples per label taken", k)
		}
	}
}

// Examples enough to pass MaxSystemBytes are refused, saying how many per
// label were asked, before a prompt is built from them.
func TestReadExamplesBoundsThePrompt(t *testing.T) {
	names := make([]string, 100)
	var b strings.Builder
	b.WriteString("text,label\n")
	for i := range names {
		names[i] = fmt.Sprintf("label%03d", i)
		for j := range MaxPerLabel {
			b.WriteString(strings.Repeat(string(rune('a'+j%26)), MaxExampleChars-10))
			b.WriteString(names[i][:5] + "," + names[i] + "\n")
		}
	}
	s, err := FromNames(names)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "big.csv")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := readExamples(t, path, s, MaxPerLabel); err == nil || !strings.Contains(err.Error(), "with 20 examples per label, the prompt's fixed part would be") {
		t.Errorf("got %v", err)
	}
	if got, _, err := readExamples(t, path, s, 5); err != nil || len(got.System(SingleInstruction)) > MaxSystemBytes {
		t.Errorf("5 a label: %v", err)
	}
}
