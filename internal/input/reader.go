// Package input streams the rows of an input CSV as people have them: RFC
// 4180 quoting and embedded newlines, a delimiter sniffed from the header
// (comma, semicolon, tab, pipe) or given, UTF-8 with or without a BOM,
// UTF-16 with a BOM or any encoding golang.org/x/text knows by name, LF,
// CRLF or CR-only line ends, columns chosen by name, and the line where
// every record starts, so that errors can name it. Text is never altered:
// bytes that are not valid in the encoding refuse the file, a CRLF inside a
// quoted field stays CRLF, and ids keep their spaces.
//
// Memory stays flat whatever the file holds: records are parsed as they
// stream (parser, which reads exactly what encoding/csv reads), only the
// id, text and client columns are kept, and a field longer than
// Options.MaxChars is kept cut to its first MaxChars characters and skipped
// while it is read. It does not use gocsv, nor encoding/csv, which hold
// whole lines and records and cannot bound a field; the columns are chosen
// at run time by flag, each record's line number is needed, and a record
// with too many fields must become one invalid row rather than end the file.
package input

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/transform"
)

// DefaultMaxChars is Options.MaxChars when it is 0, and --max-chars's
// default.
const DefaultMaxChars = 5000

// Row is one data record. ID and Text are exactly as read (spaces kept).
type Row struct {
	Seq  int64 // position among data rows, from 0
	Line int   // line where the record starts
	ID   string
	Text string
	// Client is the value of Options.ClientColumn (queue push), "" without one.
	Client string
	// Gold is the value of Options.GoldColumn (the gold label), "" without one.
	Gold string
	// Problem is set when the record's shape makes it invalid (more fields
	// than the header, an id or a client longer than Options.MaxChars);
	// such a row is recorded invalid_input, never sent.
	Problem string
	// TextChars is set when the text was longer than Options.MaxChars: it
	// was not kept whole (Text is its first MaxChars characters), and this
	// counts its characters. 0 when Text is the whole text.
	TextChars int64
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
	// GoldColumn, when set, names a column of gold labels that must be
	// there too (--gold-column); its value is Row.Gold.
	GoldColumn string
	// Delimiter separates fields; 0 sniffs it from the header line among
	// comma, semicolon, tab and pipe.
	Delimiter rune
	// Encoding names the character encoding (see LookupEncoding); "" is
	// UTF-8. A byte-order mark (UTF-8, UTF-16 LE or BE) wins over it.
	Encoding string
	// MaxChars is --max-chars: a longer field is kept cut to this many
	// characters (Row.TextChars, Row.Problem); 0 is DefaultMaxChars.
	MaxChars int
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

// Reader yields rows one at a time; it holds the kept fields of one record.
type Reader struct {
	opts      Options
	p         *parser
	delim     rune
	sniffed   bool
	encoding  string
	bom       bool // a byte-order mark chose the encoding
	idIdx     int
	textIdx   int
	clientIdx int
	goldIdx   int
	nfields   int
	seq       int64
	peeked    *Row
	err       error
	slots     [4]int // where the parser keeps the id, the text, the client and the gold label
	scratch   []byte
}

// keep has the parser keep the id, text, client and gold columns (one of
// them may name the same column as another).
func (r *Reader) keep() {
	var idx []int
	for i, c := range []int{r.idIdx, r.textIdx, r.clientIdx, r.goldIdx} {
		if c < 0 {
			continue
		}
		k := slices.Index(idx, c)
		if k < 0 {
			k, idx = len(idx), append(idx, c)
		}
		r.slots[i] = k
	}
	r.p.keep(idx...)
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

	rd := &Reader{opts: opts, delim: opts.Delimiter, encoding: used, bom: bom, idIdx: -1, textIdx: -1, clientIdx: -1, goldIdx: -1}
	if rd.delim == 0 {
		rd.delim, rd.sniffed = sniffDelimiter(peekHeader(br), opts.IDColumn, opts.TextColumn), true
	}
	if rd.opts.MaxChars <= 0 {
		rd.opts.MaxChars = DefaultMaxChars
	}
	// A column's name is kept to headerChars characters, beyond the
	// longest name looked for (spaces around a name are ignored).
	longest := 0
	for _, c := range []string{opts.IDColumn, opts.TextColumn, opts.ClientColumn, opts.GoldColumn} {
		longest = max(longest, utf8.RuneCountInString(c))
	}
	rd.p = newParser(br, rd.delim, headerChars+longest)
	rd.p.keepAll = true
	err = rd.p.record()
	if errors.Is(err, io.EOF) {
		return nil, &Error{Name: opts.Name, Msg: "is empty (expected a header line with columns " + quote(opts.IDColumn) + " and " + quote(opts.TextColumn) + ")"}
	}
	if err != nil {
		return nil, rd.fail(err)
	}
	header := make([]string, len(rd.p.fields))
	for i, f := range rd.p.fields {
		header[i] = string(f.buf)
	}
	rd.nfields = rd.p.nfields
	if err := rd.columns(header); err != nil {
		return nil, err
	}
	rd.p.limit = rd.opts.MaxChars
	rd.keep()
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
	if err := r.p.record(); err != nil {
		return Row{}, r.fail(err)
	}
	p := r.p
	row := Row{Seq: r.seq, Line: p.start}
	r.seq++
	id, text := &p.fields[r.slots[0]], &p.fields[r.slots[1]]
	// One string for both, sliced: one allocation a row.
	r.scratch = append(append(r.scratch[:0], id.buf...), text.buf...)
	both := string(r.scratch)
	row.ID, row.Text = both[:len(id.buf)], both[len(id.buf):]
	if text.cut {
		row.TextChars = text.chars
	}
	if id.cut {
		row.Problem = fmt.Sprintf("request id has %d characters, over --max-chars %d", id.chars, r.opts.MaxChars)
	}
	if r.clientIdx >= 0 {
		client := &p.fields[r.slots[2]]
		row.Client = string(client.buf)
		if client.cut && row.Problem == "" {
			row.Problem = fmt.Sprintf("client column %q has %d characters, over --max-chars %d", r.opts.ClientColumn, client.chars, r.opts.MaxChars)
		}
	}
	if r.goldIdx >= 0 {
		// Cut at --max-chars as any field is; a label is far shorter.
		row.Gold = string(p.fields[r.slots[3]].buf)
	}
	if p.nfields > r.nfields {
		row.Problem = fmt.Sprintf("line %d has %d fields, the header has %d", p.start, p.nfields, r.nfields)
	}
	return row, nil
}

// fail turns what stopped the parser into the error Next returns: io.EOF,
// or an *Error naming the file and line.
func (r *Reader) fail(err error) error {
	name := r.opts.Name
	var ie *Error
	var pe *parseError
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.As(err, &ie):
		// From prep, which names the line, or from a file that changed
		// while it was read, which names no line: the record being read.
		if ie.Line == 0 {
			e := *ie
			e.Line = r.p.line
			return &e
		}
		return ie
	case err == errTooWide:
		return &Error{Name: name, Line: r.p.start, Msg: fmt.Sprintf("the header has more than %d columns; is the --delimiter right?", maxHeaderFields)}
	case errors.As(err, &pe) && pe.Unclosed:
		// The quote is noticed only at the end of the file; the rows
		// before its record were read.
		return &Error{Name: name, Line: pe.StartLine, Msg: fmt.Sprintf("cannot parse CSV: a quote opened at line %d is never closed: the field runs to the end of the file (line %d)", pe.QuoteLine, pe.Line)}
	case errors.As(err, &pe):
		// StartLine is where the bad record begins.
		msg := "cannot parse CSV: " + pe.Kind.Error()
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
	if _, err := rd.Next(); err != nil {
		return 0, err
	}
	// Only counted: no field is kept.
	rd.p.keep()
	n := int64(1)
	for {
		err := rd.p.record()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, rd.fail(err)
		}
		n++
	}
}
