// Package input streams the rows of an input CSV: RFC 4180 quoting, embedded
// newlines, CRLF, a UTF-8 BOM, columns chosen by name, and the line where
// every record starts, so that errors can name it.
//
// It uses encoding/csv rather than gocsv because the columns are chosen at
// run time by flag, each record's line number is needed, and a record with
// too many fields must become one invalid row rather than end the file; gocsv
// offers none of the three.
package input

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Row is one data record.
type Row struct {
	Seq  int64 // position among data rows, from 0
	Line int   // line where the record starts
	ID   string
	Text string
	// Problem is set when the record's shape makes it invalid (more fields
	// than the header); such a row is recorded invalid_input, never sent.
	Problem string
}

// Options chooses the columns.
type Options struct {
	Name       string // shown in errors: a path, or "stdin"
	IDColumn   string
	TextColumn string
}

// Error is a problem with the input file itself; it names the file and, when
// known, the line.
type Error struct {
	Name string
	Line int
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.Name, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.Name, e.Msg)
}

// Reader yields rows one at a time; it holds one record in memory.
type Reader struct {
	opts    Options
	cr      *csv.Reader
	idIdx   int
	textIdx int
	nfields int
	seq     int64
	peeked  *Row
	err     error
}

const bom = "\uFEFF"

// NewReader reads the header and the first record, so that an empty file or
// a missing column is reported before anything is sent.
func NewReader(r io.Reader, opts Options) (*Reader, error) {
	if opts.Name == "" {
		opts.Name = "input"
	}
	br := bufio.NewReaderSize(r, 64<<10)
	if b, err := br.Peek(len(bom)); err == nil && string(b) == bom {
		_, _ = br.Discard(len(bom))
	}
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = -1 // a short or long record is one bad row, not the end
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &Error{Name: opts.Name, Msg: "is empty (expected a header line with columns " + quote(opts.IDColumn) + " and " + quote(opts.TextColumn) + ")"}
	}
	if err != nil {
		return nil, parseError(opts.Name, err)
	}
	rd := &Reader{opts: opts, cr: cr, idIdx: -1, textIdx: -1, nfields: len(header)}
	for i, h := range header {
		h = strings.TrimSpace(h)
		if h == opts.IDColumn && rd.idIdx < 0 {
			rd.idIdx = i
		}
		if h == opts.TextColumn && rd.textIdx < 0 {
			rd.textIdx = i
		}
	}
	var missing []string
	if rd.idIdx < 0 {
		missing = append(missing, "id column "+quote(opts.IDColumn)+" (--id-column)")
	}
	if rd.textIdx < 0 {
		missing = append(missing, "text column "+quote(opts.TextColumn)+" (--text-column)")
	}
	if len(missing) > 0 {
		return nil, &Error{Name: opts.Name, Line: 1, Msg: "header has no " + strings.Join(missing, " and no ") +
			"; columns found: " + describeHeader(header)}
	}
	first, err := rd.read()
	if errors.Is(err, io.EOF) {
		return nil, &Error{Name: opts.Name, Msg: "has a header but no rows"}
	}
	if err != nil {
		return nil, err
	}
	rd.peeked = &first
	return rd, nil
}

// Next returns the next row, io.EOF at the end, or an *Error for a record
// that cannot be parsed (reading stops there).
func (r *Reader) Next() (Row, error) {
	if r.peeked != nil {
		row := *r.peeked
		r.peeked = nil
		return row, nil
	}
	if r.err != nil {
		return Row{}, r.err
	}
	row, err := r.read()
	if err != nil {
		r.err = err
	}
	return row, err
}

func (r *Reader) read() (Row, error) {
	rec, err := r.cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return Row{}, io.EOF
		}
		return Row{}, parseError(r.opts.Name, err)
	}
	line, _ := r.cr.FieldPos(0)
	row := Row{Seq: r.seq, Line: line}
	r.seq++
	if r.idIdx < len(rec) {
		row.ID = clean(rec[r.idIdx])
	}
	if r.textIdx < len(rec) {
		row.Text = clean(rec[r.textIdx])
	}
	if len(rec) > r.nfields {
		row.Problem = fmt.Sprintf("line %d has %d fields, the header has %d", line, len(rec), r.nfields)
	}
	return row, nil
}

// clean copies a field out of the reused record buffer and replaces invalid
// UTF-8 with U+FFFD.
func clean(s string) string {
	if !utf8.ValidString(s) {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.Clone(s)
}

func parseError(name string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		// StartLine is where the bad record begins: an unclosed quote is
		// only noticed lines later, at the end of the file.
		msg := "cannot parse CSV: " + pe.Err.Error()
		if pe.Line != pe.StartLine {
			msg += fmt.Sprintf(" (noticed at line %d)", pe.Line)
		}
		return &Error{Name: name, Line: pe.StartLine, Msg: msg}
	}
	return &Error{Name: name, Msg: "cannot read: " + err.Error()}
}

func quote(s string) string { return fmt.Sprintf("%q", s) }

func describeHeader(h []string) string {
	const most = 8
	q := make([]string, 0, most)
	for i, c := range h {
		if i == most {
			q = append(q, fmt.Sprintf("... (%d in all)", len(h)))
			break
		}
		q = append(q, quote(c))
	}
	return strings.Join(q, ", ")
}

// Count reads every record to check the whole file parses, and returns the
// number of data rows. It lets a run refuse a malformed file before any call
// and gives the progress bar its total.
func Count(r io.Reader, opts Options) (int64, error) {
	rd, err := NewReader(r, opts)
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		_, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n++
	}
}
