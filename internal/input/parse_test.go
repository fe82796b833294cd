package input

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf8"
)

// csvRecord is a record as both readers see it.
type csvRecord struct {
	line   int
	fields []string
}

// readStd reads data with encoding/csv as the reader used to (and as the
// parser must): FieldsPerRecord -1, nothing else set.
func readStd(r io.Reader, comma rune) ([]csvRecord, error) {
	cr := csv.NewReader(r)
	cr.Comma = comma
	cr.FieldsPerRecord = -1
	var recs []csvRecord
	for {
		rec, err := cr.Read()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return recs, nil
			}
			return recs, err
		}
		line, _ := cr.FieldPos(0)
		recs = append(recs, csvRecord{line, rec})
	}
}

// readParsed reads data with the parser, keeping every field whole.
func readParsed(r io.Reader, comma rune, size int) ([]csvRecord, error) {
	p := newParser(bufio.NewReaderSize(r, size), comma, 1<<30)
	p.keepAll = true
	var recs []csvRecord
	for {
		if err := p.record(); err != nil {
			if errors.Is(err, io.EOF) {
				return recs, nil
			}
			return recs, err
		}
		rec := csvRecord{line: p.start}
		for _, f := range p.fields {
			rec.fields = append(rec.fields, string(f.buf))
		}
		if len(rec.fields) != p.nfields {
			return recs, fmt.Errorf("%d fields kept of %d", len(rec.fields), p.nfields)
		}
		recs = append(recs, rec)
	}
}

// sameError says whether the parser's error is encoding/csv's: the same
// kind of parse error at the same lines, or the same read error.
func sameError(std, got error) bool {
	if std == nil || got == nil {
		return std == got
	}
	var se *csv.ParseError
	var ge *parseError
	if errors.As(std, &se) {
		return errors.As(got, &ge) && ge.Kind == se.Err && ge.StartLine == se.StartLine && ge.Line == se.Line
	}
	return std == got
}

// failing yields data, then err.
type failing struct {
	r   io.Reader
	err error
}

func (f *failing) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, f.err
	}
	return n, err
}

var errBoom = errors.New("boom")

// FuzzParserMatchesEncodingCSV: on any bytes, with any delimiter, read in
// blocks of any size or one byte at a time, with or without a read error
// at the end, the parser yields exactly encoding/csv's records (fields and
// line numbers) and stops with the same error.
func FuzzParserMatchesEncodingCSV(f *testing.F) {
	for _, s := range []string{
		"a,b\n1,2\n",
		"a,b\r\n1,\"x\r\ny\"\r\n",
		"a,\"b\"\"c\"\n\n\n3,4",
		"\"unclosed\n1,2\n",
		"a,b\"c\n",
		"a,\"b\"c\n",
		"\r\r\n\r",
		"a\r",
		"\"a\r",
		"\"a\"\r",
		"a;b;c\n;;\n",
		"x§y§\"z§\"\n",
		"\"a\"\"\r\r\n\"\n,",
		"a\n\"b\n\nc\"\n\"\n",
		"\xff\"\xc2\xa7\xc2",
		"",
	} {
		f.Add([]byte(s), uint8(0), uint8(0))
	}
	commas := []rune{',', ';', '\t', '|', ' ', '§', 'x', '€', '\xa7'}
	f.Fuzz(func(t *testing.T, data []byte, c, how uint8) {
		comma := commas[int(c)%len(commas)]
		var src func() io.Reader
		boom := how&1 == 1
		if boom {
			src = func() io.Reader { return &failing{bytes.NewReader(data), errBoom} }
		} else {
			src = func() io.Reader { return bytes.NewReader(data) }
		}
		std, stdErr := readStd(src(), comma)
		for _, rd := range []struct {
			name string
			r    io.Reader
			size int
		}{
			{"blocks", src(), 4096},
			{"small buffer", src(), 16},
			{"one byte", iotest.OneByteReader(src()), 16},
		} {
			got, err := readParsed(rd.r, comma, rd.size)
			if !sameError(stdErr, err) {
				t.Fatalf("%s: error %v, encoding/csv %v (%q)", rd.name, err, stdErr, data)
			}
			if stdErr != nil {
				// encoding/csv's records before its error are the
				// parser's; the bad one is not compared.
				got = got[:min(len(got), len(std))]
			}
			if len(got) != len(std) {
				t.Fatalf("%s: %d records, encoding/csv %d (%q)", rd.name, len(got), len(std), data)
			}
			for i := range std {
				if got[i].line != std[i].line || strings.Join(got[i].fields, "\x00|") != strings.Join(std[i].fields, "\x00|") {
					t.Fatalf("%s: record %d = %d %q, encoding/csv %d %q (%q)", rd.name, i, got[i].line, got[i].fields, std[i].line, std[i].fields, data)
				}
			}
		}
	})
}

// hugeField streams a CSV whose second row's text is n bytes of s
// repeated (quoted, or not), without holding it.
func hugeField(n int64, s string, quoted bool) io.Reader {
	open, end := "", "\n"
	if quoted {
		open, end = "\"", "\"\n"
	}
	body := strings.Repeat(s, 64<<10/len(s))
	var parts []io.Reader
	parts = append(parts, strings.NewReader("request_id,text\nr1,short\nr2,"+open))
	parts = append(parts, io.LimitReader(&repeat{b: []byte(body)}, n))
	parts = append(parts, strings.NewReader(end+"r3,after\n"))
	return io.MultiReader(parts...)
}

type repeat struct {
	b   []byte
	off int
}

func (r *repeat) Read(p []byte) (int, error) {
	n := copy(p, r.b[r.off:])
	r.off = (r.off + n) % len(r.b)
	return n, nil
}

// allocated is what f allocates, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A field longer than --max-chars is kept cut to its first MaxChars
// characters and skipped while it is read: reading 300 MB of one text
// allocates next to nothing, the row says how long the text was, and the
// rows around it are read as usual. Characters are counted, not bytes.
func TestHugeFieldIsSkippedWhileRead(t *testing.T) {
	const n = 64 << 20
	for _, c := range []struct {
		name   string
		s      string
		quoted bool
		chars  int64 // characters in each s
	}{
		{"quoted", "abc", true, 3},
		{"unquoted", "abc", false, 3},
		// a, a quote, CR LF (kept), b, LF: 6 characters in 7 bytes.
		{"quoted, with line ends and quotes", "a\"\"\r\nb\n", true, 6},
		{"three bytes a character", "€", true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			reps := int64(n / len(c.s))
			chars := reps * c.chars
			src := hugeField(reps*int64(len(c.s)), c.s, c.quoted)
			var rows []Row
			var err error
			opts := std
			opts.MaxChars = 100
			mem := allocated(func() {
				var rd *Reader
				if rd, err = NewReader(src, opts); err != nil {
					return
				}
				for {
					r, e := rd.Next()
					if e != nil {
						if !errors.Is(e, io.EOF) {
							err = e
						}
						return
					}
					rows = append(rows, r)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 3 || rows[0].Text != "short" || rows[2].ID != "r3" || rows[2].Text != "after" || rows[1].ID != "r2" {
				t.Fatalf("rows %+v", rows)
			}
			r := rows[1]
			if r.TextChars != chars || utf8.RuneCountInString(r.Text) != 100 || r.Problem != "" {
				t.Fatalf("row 2: %d characters counted (want %d), %d kept (want 100), problem %q", r.TextChars, chars, utf8.RuneCountInString(r.Text), r.Problem)
			}
			if mem > 8<<20 {
				t.Fatalf("reading a %d MiB field allocated %d MB", n>>20, mem>>20)
			}
		})
	}
}

// Count reads such a file in flat memory too, and an unclosed quote that
// swallows the rest of a file is refused at the end of it, naming the line
// where the quote opened, without holding what it swallowed.
func TestUnclosedQuoteInFlatMemory(t *testing.T) {
	var n int64
	var err error
	mem := allocated(func() { n, err = Count(hugeField(64<<20, "abc", false), std) })
	if err != nil || n != 3 || mem > 8<<20 {
		t.Fatalf("Count = %d, %v, allocated %d MB", n, err, mem>>20)
	}
	src := io.MultiReader(strings.NewReader("request_id,text\nr1,ok\nr2,ok\nr3,\"never closed\n"), io.LimitReader(&repeat{b: []byte("x,y\n")}, 64<<20))
	mem = allocated(func() { n, err = Count(src, std) })
	var ie *Error
	if !errors.As(err, &ie) || ie.Line != 4 || !strings.Contains(err.Error(), "a quote opened at line 4 is never closed") || mem > 8<<20 {
		t.Fatalf("Count = %d, %v, allocated %d MB: want line 4 and the quote's line", n, err, mem>>20)
	}
	if want := fmt.Sprintf("(line %d)", 4+64<<20/4); !strings.Contains(err.Error(), want) {
		t.Errorf("error %v does not say where the file ends, %s", err, want)
	}
}

// An id or a client over the limit is cut too, and makes its row invalid.
func TestLongIDAndClient(t *testing.T) {
	opts := std
	opts.MaxChars = 5
	opts.ClientColumn = "team"
	rows, err := readAll(t, "request_id,text,team\n123456,ok,a\n1,ok,abcdefg\n2,ok,abcde\n", opts)
	if err != nil || len(rows) != 3 {
		t.Fatal(rows, err)
	}
	if rows[0].ID != "12345" || !strings.Contains(rows[0].Problem, "request id has 6 characters, over --max-chars 5") {
		t.Errorf("row 1: %+v", rows[0])
	}
	if rows[1].Client != "abcde" || !strings.Contains(rows[1].Problem, `client column "team" has 7 characters`) {
		t.Errorf("row 2: %+v", rows[1])
	}
	if rows[2].Problem != "" || rows[2].Client != "abcde" {
		t.Errorf("row 3: %+v", rows[2])
	}
	// The same column as id and text (and client).
	opts.ClientColumn = "request_id"
	opts.TextColumn = "request_id"
	rows, err = readAll(t, "request_id,x\nabc,1\n", opts)
	if err != nil || len(rows) != 1 || rows[0].ID != "abc" || rows[0].Text != "abc" || rows[0].Client != "abc" {
		t.Fatalf("%+v %v", rows, err)
	}
}

// A header of more columns than the reader keeps is refused, naming the
// flag that may be wrong; a long column name is cut, so it matches nothing.
func TestHeaderBounds(t *testing.T) {
	_, err := NewReader(strings.NewReader("request_id,text"+strings.Repeat(",", maxHeaderFields)+"\n1,a\n"), std)
	if err == nil || !strings.Contains(err.Error(), "in.csv:1: the header has more than 65536 columns") {
		t.Fatalf("error %v", err)
	}
	_, err = NewReader(strings.NewReader("request_id,"+strings.Repeat("y", 1<<20)+"\n1,a\n"), std)
	if err == nil || !strings.Contains(err.Error(), `no text column "text"`) || len(err.Error()) > 1000 {
		t.Fatalf("error %.300v (%d bytes)", err, len(err.Error()))
	}
}
