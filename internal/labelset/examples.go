package labelset

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hfsent/hfsent/internal/input"
)

// MaxPerLabel bounds the examples chosen for each label.
const MaxPerLabel = 20

// ExamplesOptions say how to read a labelled CSV of examples.
type ExamplesOptions struct {
	// Input says how the file is read, as an input file is: Name (shown in
	// errors), TextColumn, Delimiter (0 sniffs it), Encoding. IDColumn and
	// MaxChars are set by ReadExamples.
	Input input.Options
	// LabelColumn names the column of labels.
	LabelColumn string
	// TextFlag and LabelFlag are the flags that name the two columns, for
	// messages about a column that is not there.
	TextFlag, LabelFlag string
	// PerLabel is how many examples to choose for each label, 1 to
	// MaxPerLabel.
	PerLabel int
}

// ExamplesRead counts what ReadExamples did with the file's rows.
type ExamplesRead struct {
	Rows       int64 // data rows read
	Unlabelled int64 // with a blank label: skipped
	// Skipped rows had a blank text, a text over MaxExampleChars, or more
	// fields than the header.
	Skipped int64
	Chosen  int // examples added, in all
	// Fewer are the labels the file had fewer than PerLabel usable rows of,
	// in the set's order.
	Fewer []string
}

// ReadExamples chooses PerLabel examples of each label from a labelled CSV
// (a text column and a label column) and returns a copy of s with them
// after each label's own examples (a text among those, or on two rows, is
// taken once). A label cell is matched as --labels are
// compared; one that names no label of the set is refused, naming its
// line.
//
// The choice is the rows whose texts have the smallest SHA-256, in that
// order: it depends on the texts alone, not on where they are in the file,
// so the same rows give the same prompt, sorted or shuffled, and a row
// added changes the prompt only when its text ranks among its label's
// first. A sample by hash is as good as a random one, where the file's
// first rows (often the oldest, or sorted by something) need not be.
// Memory holds PerLabel texts a label, whatever the file's length.
func ReadExamples(r io.Reader, s *Set, o ExamplesOptions) (*Set, ExamplesRead, error) {
	var st ExamplesRead
	if o.PerLabel < 1 || o.PerLabel > MaxPerLabel {
		return nil, st, fmt.Errorf("examples per label: want 1 to %d, got %d", MaxPerLabel, o.PerLabel)
	}
	opts := o.Input
	opts.IDColumn, opts.ClientColumn, opts.MaxChars = o.LabelColumn, "", MaxExampleChars
	rd, err := input.NewReader(r, opts)
	if err != nil {
		return nil, st, columnError(err, o)
	}
	pick := newPicker(s, o.PerLabel)
	for {
		row, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, st, err
		}
		st.Rows++
		label := strings.TrimSpace(row.ID)
		switch {
		case row.Problem != "" || row.TextChars > 0 || strings.TrimSpace(row.Text) == "":
			st.Skipped++
			continue
		case label == "":
			st.Unlabelled++
			continue
		}
		i := pick.index(label)
		if i < 0 {
			return nil, st, &input.Error{Name: opts.Name, Line: row.Line, Msg: fmt.Sprintf("label %q (column %q) is none of the labels (%s)", clip(label), o.LabelColumn, listNames(s))}
		}
		pick.add(i, Example{Text: row.Text, Line: row.Line})
	}
	out := s.clone()
	for i, chosen := range pick.chosen {
		for _, c := range chosen {
			out.Labels[i].Examples = append(out.Labels[i].Examples, c.e)
		}
		st.Chosen += len(chosen)
		if len(chosen) < o.PerLabel {
			st.Fewer = append(st.Fewer, s.Labels[i].Name)
		}
	}
	if err := out.checkSize(); err != nil {
		return nil, st, &input.Error{Name: opts.Name, Msg: fmt.Sprintf("with %d examples per label, %s", o.PerLabel, err.(*Error).Msg)}
	}
	return out, st, nil
}

// columnError names the flags of the examples file's columns: the input
// reader, which the id and text columns of an input file are read with,
// names --id-column for the label column.
func columnError(err error, o ExamplesOptions) error {
	var ie *input.Error
	if !errors.As(err, &ie) || ie.Line != 1 {
		return err
	}
	e := *ie
	label, text := o.LabelFlag, o.TextFlag
	if label == "" {
		label = "the label column"
	}
	if text == "" {
		text = "the text column"
	}
	e.Msg = strings.NewReplacer("id column", "label column", "--id-column", label, "--text-column", text).Replace(e.Msg)
	return &e
}

// listNames is the set's names for a message, the first 10 of them.
func listNames(s *Set) string {
	n := s.Names()
	if len(n) > 10 {
		return strings.Join(n[:10], ", ") + fmt.Sprintf(", ... (%d in all)", len(n))
	}
	return strings.Join(n, ", ")
}

type candidate struct {
	key [sha256.Size]byte
	e   Example
}

// picker keeps, for each label, the k examples whose texts hash smallest,
// sorted by hash.
type picker struct {
	s      *Set
	k      int
	chosen [][]candidate
	known  []map[[sha256.Size]byte]bool // the label file's own examples
	cells  map[string]int               // a label cell as written → its label
}

func newPicker(s *Set, k int) *picker {
	p := &picker{s: s, k: k, chosen: make([][]candidate, len(s.Labels)), known: make([]map[[sha256.Size]byte]bool, len(s.Labels)), cells: map[string]int{}}
	for i, l := range s.Labels {
		p.known[i] = map[[sha256.Size]byte]bool{}
		for _, e := range l.Examples {
			p.known[i][sha256.Sum256([]byte(e.Text))] = true
		}
	}
	return p
}

// maxCells bounds the label cells remembered: a labelled file writes its
// labels a few ways ("Positive", "positive"), so it is seldom reached.
const maxCells = 1024

// index is the label a cell names (Set.Index, remembered), or -1.
func (p *picker) index(cell string) int {
	if i, ok := p.cells[cell]; ok {
		return i
	}
	i := p.s.Index(cell)
	if i >= 0 && len(p.cells) < maxCells {
		p.cells[cell] = i
	}
	return i
}

// add offers an example of label i. A text the label has already (in the
// label file, or kept from an earlier row) is not taken twice.
func (p *picker) add(i int, e Example) {
	c := candidate{key: sha256.Sum256([]byte(e.Text)), e: e}
	if p.known[i][c.key] {
		return
	}
	list := p.chosen[i]
	at, found := slices.BinarySearchFunc(list, c, func(a, b candidate) int { return bytes.Compare(a.key[:], b.key[:]) })
	if found || at >= p.k {
		return // kept already, or ranks after the k kept
	}
	list = slices.Insert(list, at, c)
	if len(list) > p.k {
		list[p.k] = candidate{} // its text is not held
		list = list[:p.k]
	}
	p.chosen[i] = list
}
