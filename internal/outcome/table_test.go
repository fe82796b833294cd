package outcome

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The documentation's table of outcome codes is this package's table: the
// same codes, in its order, with its HTTP statuses, as TestDocsAreCurrent
// keeps docs/ true to the commands. It is looked for in the README and the
// guides beside the command reference (docs/*.md), wherever it lives.
func TestDocumentedOutcomesAreTheTable(t *testing.T) {
	root := filepath.Join("..", "..")
	files, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var found []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rows, ok := outcomeTable(string(data))
		if !ok {
			continue
		}
		found = append(found, f)
		if len(rows) != len(table) {
			t.Errorf("%s: the outcome table has %d rows, the code has %d codes", f, len(rows), len(table))
		}
		for i, in := range table {
			if i >= len(rows) {
				break
			}
			if got := rows[i]; got[0] != string(in.Code) || got[1] != strconv.Itoa(in.Status) {
				t.Errorf("%s: row %d is %s %s, want %s %d (internal/outcome/table.go)", f, i+1, got[0], got[1], in.Code, in.Status)
			}
		}
	}
	if len(found) == 0 {
		t.Fatalf("no table of outcome codes (a header | outcome | status | ...) in %v", files)
	}
}

// outcomeTable returns the code and status of each row of the Markdown
// table whose header starts "| outcome | status |".
func outcomeTable(doc string) (rows [][2]string, ok bool) {
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		cells := cellsOf(l)
		if len(cells) < 2 || cells[0] != "outcome" || cells[1] != "status" {
			continue
		}
		for _, r := range lines[i+2:] { // past the |---| line
			c := cellsOf(r)
			if len(c) < 2 {
				break
			}
			rows = append(rows, [2]string{strings.Trim(c[0], "`"), c[1]})
		}
		return rows, true
	}
	return nil, false
}

func cellsOf(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") {
		return nil
	}
	parts := strings.Split(strings.Trim(line, "|"), "|")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// The table is whole: every code once, each with a status, a colour of its
// own, and never both final and stopping a run (a stop is mended, so it is
// redone).
func TestTableIsWhole(t *testing.T) {
	codes, colours := map[Code]bool{}, map[string]Code{}
	for _, in := range table {
		if codes[in.Code] {
			t.Errorf("%s is in the table twice", in.Code)
		}
		codes[in.Code] = true
		if in.Status < 200 || in.Status > 599 {
			t.Errorf("%s: status %d", in.Code, in.Status)
		}
		if other, ok := colours[in.Colour]; ok || !strings.HasPrefix(in.Colour, "#") {
			t.Errorf("%s: colour %q (also %s's)", in.Code, in.Colour, other)
		}
		colours[in.Colour] = in.Code
		if in.Final && in.StopsRun {
			t.Errorf("%s is final and stops the run", in.Code)
		}
		if !in.Code.Valid() || in.Code.Status() != in.Status || in.Code.Colour() != in.Colour {
			t.Errorf("%s: its methods do not read its row", in.Code)
		}
	}
	if Code("no_such_code").Valid() || Code("no_such_code").Status() != 500 {
		t.Error("an unknown code is valid, or not a 500")
	}
}
