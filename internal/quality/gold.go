package quality

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hfsent/hfsent/internal/input"
)

// MaxGoldRows bounds a gold file: its labels are held in memory, by id,
// to be joined with a results file (about 100 bytes a row).
const MaxGoldRows = 10_000_000

// Gold is a gold file's labels by request id (spaces around an id
// ignored, as the results' ids are matched).
type Gold struct {
	labels map[string]goldRow
	Rows   int64 // rows read
	Blank  int64 // of them, with a blank gold label
}

// ReadGold reads a gold file: a CSV with an id column and a gold column,
// read as an input file is (delimiter, encoding, line ends: opts names
// the columns, IDColumn and GoldColumn). The file the run classified,
// with its gold column, is one; a review file (--review-out) filled in by
// a person is another. An id given twice with two different labels is
// refused, naming the line.
func ReadGold(r io.Reader, opts input.Options) (*Gold, error) {
	// The gold column is read as the input's text: it must be there, and
	// is kept as it is.
	opts.TextColumn, opts.GoldColumn = opts.GoldColumn, ""
	rd, err := input.NewReader(r, opts)
	if err != nil {
		return nil, err
	}
	g := &Gold{labels: map[string]goldRow{}}
	for {
		row, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return g, nil
		}
		if err != nil {
			return nil, err
		}
		if g.Rows++; g.Rows > MaxGoldRows {
			return nil, &input.Error{Name: opts.Name, Line: row.Line, Msg: fmt.Sprintf("more than %d rows: a gold file is a labelled sample", MaxGoldRows)}
		}
		id := strings.TrimSpace(row.ID)
		if id == "" {
			continue
		}
		if strings.TrimSpace(row.Text) == "" {
			g.Blank++
		}
		if prev, ok := g.labels[id]; ok && Key(prev.label) != Key(row.Text) {
			return nil, &input.Error{Name: opts.Name, Line: row.Line, Msg: fmt.Sprintf("request id %q has gold label %q here and %q at line %d", id, row.Text, prev.label, prev.line)}
		}
		g.labels[id] = goldRow{row.Text, row.Line}
	}
}

type goldRow struct {
	label string
	line  int
}

// Label is the gold label of a request id; ok is false when the file has
// no row for it.
func (g *Gold) Label(id string) (string, bool) {
	l, ok := g.labels[strings.TrimSpace(id)]
	return l.label, ok
}
