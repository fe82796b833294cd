package input

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"io"
	"unicode/utf8"
)

// parser reads CSV records as encoding/csv's Reader does (RFC 4180 quoting,
// one delimiter, FieldsPerRecord -1, no comments, no lazy quotes), with the
// same fields, the same line numbers and the same errors, but it streams:
// it never holds a line or a record whole. A field is kept only when its
// record's slot asks for it, and then only up to limit characters; the rest
// of it is counted and skipped as it is read. So one 300 MB field, or an
// unclosed quote that swallows the rest of a file, costs the reader no more
// memory than a short one.
//
// encoding/csv cannot do this: its Reader reads a whole line (and a quoted
// field's every line) into one buffer before it splits it, and offers no
// bound on a field or a record. gocsv and the other CSV libraries are built
// on it, or read whole records too.
//
// What encoding/csv does to line ends is kept exactly: a CR LF is read as
// one LF (prep doubles the CR of a CR LF inside quotes, so that it survives
// as CR LF), and a CR that ends the input is dropped.
type parser struct {
	br     *bufio.Reader
	comma  []byte
	single bool // the delimiter is one byte
	// stop marks the bytes that end a run of plain text outside quotes: a
	// quote, a line end, and the delimiter's first byte.
	stop [256]bool

	// limit is how many characters of a kept field are kept (the header's
	// are kept to headerChars).
	limit int
	// keepAll keeps every field (the header), at most maxHeaderFields;
	// otherwise want lists the fields kept, by index, each in its slot.
	keepAll bool
	want    []int

	line int // the line of the next byte, from 1

	// The record just read.
	start   int     // the line it starts on
	nfields int     // its fields, kept or not
	fields  []field // the kept fields, by slot
	err     error   // once set, returned for ever
}

// field is a kept field: its first characters (all of them unless cut),
// and how many there were in all once it is cut.
type field struct {
	buf   []byte
	chars int64 // counted once the bytes pass the limit
	cut   bool
}

// maxHeaderFields bounds the columns of a header, and headerChars the
// characters kept of each column's name: the header is kept whole, so
// these bound what it costs.
const (
	maxHeaderFields = 1 << 16
	headerChars     = 256
)

// parseError is a record encoding/csv would refuse: Kind is csv.ErrQuote or
// csv.ErrBareQuote, StartLine and Line are csv.ParseError's. Unclosed is
// set when a quoted field runs to the end of the input; QuoteLine is where
// it opened.
type parseError struct {
	Kind      error
	StartLine int
	Line      int
	Unclosed  bool
	QuoteLine int
}

func (e *parseError) Error() string { return e.Kind.Error() }

// errTooWide is a header with more than maxHeaderFields columns.
var errTooWide = &parseError{Kind: csv.ErrFieldCount}

func newParser(br *bufio.Reader, comma rune, limit int) *parser {
	p := &parser{br: br, comma: utf8.AppendRune(nil, comma), limit: limit, line: 1}
	p.single = len(p.comma) == 1
	for _, c := range []byte{'"', '\n', '\r', p.comma[0]} {
		p.stop[c] = true
	}
	return p
}

// keep sets which fields of the records that follow are kept, in slots
// 0, 1, ... in the order given.
func (p *parser) keep(indexes ...int) {
	p.keepAll = false
	p.want = indexes
	p.fields = p.fields[:0]
	for range indexes {
		p.fields = append(p.fields, field{})
	}
}

// record reads the next record: p.start, p.nfields and p.fields say what
// it holds. It returns io.EOF at the end, a *parseError for a record
// encoding/csv refuses, or the error reading failed with.
func (p *parser) record() error {
	if p.err != nil {
		return p.err
	}
	if err := p.parseRecord(); err != nil {
		p.err = err
		return err
	}
	return nil
}

func (p *parser) parseRecord() error {
	// Empty lines are skipped.
	for {
		c, n, err := p.peek()
		if err != nil {
			return err
		}
		if c != '\n' {
			break
		}
		p.take(n)
		p.line++
	}
	p.start, p.nfields = p.line, 0
	if p.keepAll {
		p.fields = p.fields[:0]
	}
	for i := range p.fields {
		p.fields[i].buf, p.fields[i].chars, p.fields[i].cut = p.fields[i].buf[:0], 0, false
	}
	for {
		last, err := p.parseField()
		if err != nil {
			return err
		}
		if last {
			return nil
		}
	}
}

// slot is where field i of the record is kept, or nil.
func (p *parser) slot(i int) *field {
	if p.keepAll {
		if i >= maxHeaderFields {
			return nil
		}
		p.fields = append(p.fields, field{})
		return &p.fields[i]
	}
	for k, w := range p.want {
		if w == i {
			return &p.fields[k]
		}
	}
	return nil
}

// parseField reads one field; last reports that it ended its record.
func (p *parser) parseField() (last bool, err error) {
	f := p.slot(p.nfields)
	p.nfields++
	if p.keepAll && p.nfields > maxHeaderFields {
		return false, errTooWide
	}
	c, _, err := p.peek()
	switch {
	case err == io.EOF:
		return true, nil
	case err != nil:
		return false, err
	case c == '"':
		p.take(1)
		return p.quoted(f)
	}
	return p.unquoted(f)
}

func (p *parser) unquoted(f *field) (last bool, err error) {
	for {
		w, err := p.window()
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		i := 0
		for i < len(w) && !p.stop[w[i]] {
			i++
		}
		if i > 0 {
			p.add(f, w[:i])
			p.take(i)
		}
		if i == len(w) {
			continue
		}
		switch w[i] {
		case '"':
			return false, &parseError{Kind: csv.ErrBareQuote, StartLine: p.start, Line: p.line}
		case '\n':
			p.take(1)
			p.line++
			return true, nil
		case '\r':
			c, n, err := p.peek()
			switch {
			case err == io.EOF:
				return true, nil
			case err != nil:
				return false, err
			case c == '\n':
				p.take(n)
				p.line++
				return true, nil
			}
			// Peeking may have moved the buffer: w is stale.
			p.add(f, []byte{'\r'})
			p.take(1)
		default: // the delimiter's first byte
			if p.atComma() {
				return false, nil
			}
			p.add(f, p.comma[:1])
			p.take(1)
		}
	}
}

func (p *parser) quoted(f *field) (last bool, err error) {
	opened := p.line
	endsNL := false // the last byte read is a line end
	for {
		w, err := p.window()
		if err == io.EOF {
			// encoding/csv names the last line that held anything.
			line := p.line
			if endsNL {
				line--
			}
			return false, &parseError{Kind: csv.ErrQuote, StartLine: p.start, Line: line, Unclosed: true, QuoteLine: opened}
		}
		if err != nil {
			return false, err
		}
		i := bytes.IndexByte(w, '"')
		if i < 0 {
			i = len(w)
		}
		if cr := bytes.IndexByte(w[:i], '\r'); cr >= 0 {
			i = cr
		}
		if i > 0 {
			run := w[:i]
			p.add(f, run)
			p.line += bytes.Count(run, []byte{'\n'})
			endsNL = run[len(run)-1] == '\n'
			p.take(i)
		}
		if i == len(w) {
			continue
		}
		if w[i] == '\r' {
			c, n, err := p.peek()
			switch {
			case err == io.EOF:
				continue // a last CR is dropped: the quote is unclosed
			case err != nil:
				return false, err
			}
			p.add(f, []byte{c})
			p.take(n)
			endsNL = c == '\n'
			if endsNL {
				p.line++
			}
			continue
		}
		// A quote: doubled, or the end of the field.
		p.take(1)
		endsNL = false
		c, n, err := p.peek()
		switch {
		case err == io.EOF:
			return true, nil
		case err != nil:
			return false, err
		case c == '"':
			p.add(f, []byte{'"'})
			p.take(1)
		case c == '\n':
			p.take(n)
			p.line++
			return true, nil
		case c == p.comma[0] && p.atComma():
			return false, nil
		default:
			return false, &parseError{Kind: csv.ErrQuote, StartLine: p.start, Line: p.line}
		}
	}
}

// atComma reports whether the delimiter comes next, and takes it if so.
func (p *parser) atComma() bool {
	if p.single {
		p.take(1)
		return true
	}
	b, _ := p.br.Peek(len(p.comma))
	if bytes.Equal(b, p.comma) {
		p.take(len(p.comma))
		return true
	}
	return false
}

// peek is the next byte as encoding/csv sees it, and how many bytes it
// takes: a CR LF is one LF, and a CR that ends the input is dropped (taken
// here, and io.EOF returned). err is io.EOF at the end, or what reading
// failed with.
func (p *parser) peek() (c byte, n int, err error) {
	b, err := p.br.Peek(1)
	if len(b) == 0 {
		return 0, 0, err
	}
	if b[0] != '\r' {
		return b[0], 1, nil
	}
	b, err = p.br.Peek(2)
	switch {
	case len(b) == 2 && b[1] == '\n':
		return '\n', 2, nil
	case err == io.EOF:
		p.take(1)
		return 0, 0, io.EOF
	}
	// Before a read error the CR is a byte like any other, as it is to
	// encoding/csv; the error comes next.
	return '\r', 1, nil
}

// window is what is buffered, reading more when nothing is.
func (p *parser) window() ([]byte, error) {
	n := p.br.Buffered()
	if n == 0 {
		if _, err := p.br.Peek(1); err != nil {
			return nil, err
		}
		n = p.br.Buffered()
	}
	w, _ := p.br.Peek(n)
	return w, nil
}

func (p *parser) take(n int) { _, _ = p.br.Discard(n) }

// add appends b to f, if f is kept, within the limit. The characters are
// counted only once the bytes pass the limit (a character is at least one
// byte), so a short field costs no counting.
func (p *parser) add(f *field, b []byte) {
	if f == nil {
		return
	}
	limit := p.limit
	if f.cut {
		f.chars += chars(b)
		return
	}
	if len(f.buf)+len(b) <= limit {
		f.buf = append(f.buf, b...)
		return
	}
	if f.chars == 0 {
		f.chars = chars(f.buf)
	}
	for i, c := range b {
		if utf8.RuneStart(c) {
			if f.chars == int64(limit) {
				f.cut = true
				f.chars += chars(b[i:])
				return
			}
			f.chars++
		}
		f.buf = append(f.buf, c)
	}
}

// chars counts the characters of valid UTF-8 that b holds or starts: a
// character cut off at either end counts where it starts.
func chars(b []byte) int64 {
	n := int64(len(b))
	for _, c := range b {
		if c&0xC0 == 0x80 {
			n--
		}
	}
	return n
}
