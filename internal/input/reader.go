// Package input streams the rows of an input CSV as people have them: RFC
// 4180 quoting and embedded newlines, a delimiter sniffed from the header
// (comma, semicolon, tab, pipe) or given, UTF-8 with or without a BOM,
// UTF-16 with a BOM or any encoding golang.org/x/text knows by name, LF,
// CRLF or CR-only line ends, columns chosen by name, and the line where
// every record starts, so that errors can name it. Text is never altered:
// bytes that are not valid in the encoding refuse the file, a CRLF inside a
// quoted field stays CRLF, and ids keep their spaces.
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

	"golang.org/x/text/transform"
)

// Row is one data record. ID and Text are exactly as read (spaces kept).
type Row struct {
	Seq  int64 // position among data rows, from 0
	Line int   // line where the record starts
	ID   string
	Text string
	// Client is the value of Options.ClientColumn (queue push), "" without one.
	Client string
	// Problem is set when the record's shape makes it invalid (more fields
	// than the header); such a row is recorded invalid_input, never sent.
	Problem string
}

// Options say how to read the input. Every command that reads an input CSV
// takes the same ones (see Check).
type Options struct {
	Name       string // shown in errors: a path, or "stdin"
	IDColumn   string
	TextColumn string
	// ClientColumn, when set, names a third column that must be there too
	// (queue push --client-column); its value is Row.Client.
	ClientColumn string
	// Delimiter separates fields; 0 sniffs it from the header line among
	// comma, semicolon, tab and pipe.
	Delimiter rune
	// Encoding names the character encoding (see LookupEncoding); "" is
	// UTF-8. A byte-order mark (UTF-8, UTF-16 LE or BE) wins over it.
	Encoding string
}

// Check reports a delimiter or an encoding that cannot be used, naming the
// flag (--delimiter, --encoding), so a command can refuse it before
// anything is opened.
func (o Options) Check() error {
	if o.Delimiter != 0 {
		if err := checkDelimiter(o.Delimiter); err != nil {
			return err
		}
	}
	_, err := LookupEncoding(o.Encoding)
	return err
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
	opts      Options
	cr        *csv.Reader
	delim     rune
	sniffed   bool
	encoding  string
	bom       bool // a byte-order mark chose the encoding
	idIdx     int
	textIdx   int
	clientIdx int
	nfields   int
	seq       int64
	peeked    *Row
	err       error
}

// NewReader reads the header and the first record, so that an empty file, a
// missing or doubled column, or a wrong delimiter is reported before
// anything is sent.
func NewReader(r io.Reader, opts Options) (*Reader, error) {
	if opts.Name == "" {
		opts.Name = "input"
	}
	if err := opts.Check(); err != nil {
		return nil, err
	}
	enc, _ := LookupEncoding(opts.Encoding)
	src, dec, used, bom, err := openEncoded(r, enc)
	if err != nil {
		return nil, &Error{Name: opts.Name, Msg: "cannot read: " + err.Error()}
	}
	p := &prep{name: opts.Name, encName: used, decoded: dec != nil}
	var t transform.Transformer = p
	if dec != nil {
		t = transform.Chain(dec, p)
	}
	br := bufio.NewReaderSize(transform.NewReader(src, t), 64<<10)

	rd := &Reader{opts: opts, delim: opts.Delimiter, encoding: used, bom: bom, idIdx: -1, textIdx: -1, clientIdx: -1}
	if rd.delim == 0 {
		rd.delim, rd.sniffed = sniffDelimiter(peekHeader(br), opts.IDColumn, opts.TextColumn), true
	}
	cr := csv.NewReader(br)
	cr.Comma = rd.delim
	cr.FieldsPerRecord = -1 // a short or long record is one bad row, not the end
	cr.ReuseRecord = true
	rd.cr = cr
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &Error{Name: opts.Name, Msg: "is empty (expected a header line with columns " + quote(opts.IDColumn) + " and " + quote(opts.TextColumn) + ")"}
	}
	if err != nil {
		return nil, parseError(opts.Name, err)
	}
	rd.nfields = len(header)
	if err := rd.columns(header); err != nil {
		return nil, err
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

// Delimiter is the field delimiter in use, and whether it was sniffed.
func (r *Reader) Delimiter() (d rune, sniffed bool) { return r.delim, r.sniffed }

// Encoding is the encoding read, as a log shows it: "utf-8",
// "utf-16le (BOM)" (a byte-order mark chose it), "windows-1252"...
func (r *Reader) Encoding() string {
	if r.bom {
		return r.encoding + " (BOM)"
	}
	return r.encoding
}

// EncodingName is the encoding read, by its name alone: "utf-16le".
func (r *Reader) EncodingName() string { return r.encoding }

// Next returns the next row, io.EOF at the end, or an *Error for a record
// that cannot be parsed or holds bytes not valid in the encoding (reading
// stops there).
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
	var id, text string
	if r.idIdx < len(rec) {
		id = rec[r.idIdx]
	}
	if r.textIdx < len(rec) {
		text = rec[r.textIdx]
	}
	row.ID, row.Text = detach(rec, id, text)
	if r.clientIdx >= 0 && r.clientIdx < len(rec) {
		row.Client = strings.Clone(rec[r.clientIdx])
	}
	if len(rec) > r.nfields {
		row.Problem = fmt.Sprintf("line %d has %d fields, the header has %d", line, len(rec), r.nfields)
	}
	return row, nil
}

// detach returns id and text so that they do not keep the rest of the record
// alive. encoding/csv makes one string per record and slices the fields out
// of it; when the id and text are most of it (the usual two-column file)
// they keep pointing into it, which costs nothing; otherwise they are copied
// out together, in one allocation.
func detach(rec []string, id, text string) (string, string) {
	total := 0
	for _, f := range rec {
		total += len(f)
	}
	if 2*(len(id)+len(text)) >= total {
		return id, text
	}
	both := strings.Clone(id + text)
	return both[:len(id)], both[len(id):]
}

func parseError(name string, err error) error {
	var ie *Error
	if errors.As(err, &ie) {
		return ie // from prep: it names the file and line already
	}
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
