package input

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/unicode"
)

// readWith reads data through r(data) (whole, or one byte at a time, ...).
func readWith(data string, opts Options, wrap func(io.Reader) io.Reader) (*Reader, []Row, error) {
	rd, err := NewReader(wrap(strings.NewReader(data)), opts)
	if err != nil {
		return nil, nil, err
	}
	var rows []Row
	for {
		r, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rd, rows, nil
		}
		if err != nil {
			return rd, rows, err
		}
		rows = append(rows, r)
	}
}

func whole(r io.Reader) io.Reader { return r }

// Every reading below is also done one byte at a time and in halves, so
// that a CR, a quote or a character split between reads is handled.
var wraps = map[string]func(io.Reader) io.Reader{
	"whole": whole, "onebyte": iotest.OneByteReader, "half": iotest.HalfReader,
}

type rowWant struct{ id, text string }

func checkRows(t *testing.T, data string, opts Options, want []rowWant) *Reader {
	t.Helper()
	var rd *Reader
	for name, wrap := range wraps {
		r, rows, err := readWith(data, opts, wrap)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(rows) != len(want) {
			t.Fatalf("%s: %d rows, want %d: %+v", name, len(rows), len(want), rows)
		}
		for i, w := range want {
			if rows[i].ID != w.id || rows[i].Text != w.text || rows[i].Problem != "" {
				t.Errorf("%s: row %d = %q %q (%s), want %q %q", name, i, rows[i].ID, rows[i].Text, rows[i].Problem, w.id, w.text)
			}
		}
		rd = r
	}
	return rd
}

func TestDelimiterSniffed(t *testing.T) {
	want := []rowWant{{"1", "Très bien, merci"}, {"2", "two\nlines; really | here"}}
	for _, c := range []struct {
		name  string
		delim rune
		data  string
	}{
		{"comma", ',', "request_id,text\n1,\"Très bien, merci\"\n2,\"two\nlines; really | here\"\n"},
		{"semicolon (European Excel)", ';', "request_id;text\r\n1;Très bien, merci\r\n2;\"two\nlines; really | here\"\r\n"},
		{"tab", '\t', "request_id\ttext\n1\tTrès bien, merci\n2\t\"two\nlines; really | here\"\n"},
		{"pipe", '|', "request_id|text\n1|Très bien, merci\n2|\"two\nlines; really | here\"\n"},
		// More commas than semicolons in the header, but only the
		// semicolon splits it into the wanted columns.
		{"the split that names both columns wins", ';', "\"a,b,c,d\";request_id;text\nx;1;Très bien, merci\ny;2;\"two\nlines; really | here\"\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rd := checkRows(t, c.data, std, want)
			if d, sniffed := rd.Delimiter(); d != c.delim || !sniffed {
				t.Errorf("delimiter %q sniffed=%v, want %q sniffed", d, sniffed, c.delim)
			}
		})
	}
}

func TestDelimiterGiven(t *testing.T) {
	o := std
	o.Delimiter = ';'
	rd := checkRows(t, "request_id;text;more\n1;a,b;c\n", o, []rowWant{{"1", "a,b"}})
	if d, sniffed := rd.Delimiter(); d != ';' || sniffed {
		t.Errorf("delimiter %q sniffed=%v", d, sniffed)
	}
	// A comma forced on a semicolon file: one column holding ';'.
	o.Delimiter = ','
	_, err := NewReader(strings.NewReader("request_id;text\n1;a\n"), o)
	if err == nil || !strings.Contains(err.Error(), "in.csv:1:") || !strings.Contains(err.Error(), "--delimiter ';'") {
		t.Fatalf("error %v: want line 1 and --delimiter ';'", err)
	}
	o.Delimiter = '|'
	_, err = NewReader(strings.NewReader("request_id\ttext\n1\ta\n"), o)
	if err == nil || !strings.Contains(err.Error(), "--delimiter tab") {
		t.Fatalf("error %v: want --delimiter tab", err)
	}
}

func TestParseDelimiter(t *testing.T) {
	for in, want := range map[string]rune{"": 0, ";": ';', "tab": '\t', `\t`: '\t', "\t": '\t', "|": '|', "§": '§'} {
		if got, err := ParseDelimiter(in); err != nil || got != want {
			t.Errorf("ParseDelimiter(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{";;", `"`, "\n", "\r", "ab", "\xff"} {
		if _, err := ParseDelimiter(bad); err == nil || !strings.Contains(err.Error(), "--delimiter") {
			t.Errorf("ParseDelimiter(%q): error %v, want one naming --delimiter", bad, err)
		}
	}
}

func TestUTF16WithBOM(t *testing.T) {
	// Excel's "Unicode Text": UTF-16 LE with a BOM, tab-separated, CRLF.
	plain := "request_id\ttext\r\n1\tÇa marche 👍\r\n2\t\"deux\r\nlignes\"\r\n"
	want := []rowWant{{"1", "Ça marche 👍"}, {"2", "deux\r\nlignes"}}
	for _, c := range []struct {
		name string
		end  unicode.Endianness
		used string
	}{{"LE", unicode.LittleEndian, "utf-16le (BOM)"}, {"BE", unicode.BigEndian, "utf-16be (BOM)"}} {
		t.Run(c.name, func(t *testing.T) {
			data, err := unicode.UTF16(c.end, unicode.UseBOM).NewEncoder().String(plain)
			if err != nil {
				t.Fatal(err)
			}
			rd := checkRows(t, data, std, want)
			if rd.Encoding() != c.used {
				t.Errorf("encoding %q, want %q", rd.Encoding(), c.used)
			}
		})
	}
	// A lone surrogate is not valid UTF-16: refused, naming the line.
	data, _ := unicode.UTF16(unicode.LittleEndian, unicode.UseBOM).NewEncoder().String("request_id,text\n1,ok\n2,")
	data += "\x00\xD8" + "x\x00\n\x00"
	_, _, err := readWith(data, std, whole)
	if err == nil || !strings.Contains(err.Error(), "in.csv:3:") || !strings.Contains(err.Error(), "not valid utf-16le") {
		t.Fatalf("error %v: want line 3, not valid utf-16le", err)
	}
}

func TestUTF16WithoutBOMHint(t *testing.T) {
	data, _ := unicode.UTF16(unicode.LittleEndian, unicode.IgnoreBOM).NewEncoder().String("request_id,text\n1,a\n")
	_, err := NewReader(strings.NewReader(data), std)
	if err == nil || !strings.Contains(err.Error(), "--encoding utf-16le") {
		t.Fatalf("error %v: want a hint naming --encoding utf-16le", err)
	}
}

func TestNamedEncoding(t *testing.T) {
	plain := "request_id;text\r\n1;Crème brûlée – «super»\r\nÉ2;naïve\r\n"
	data, err := charmap.Windows1252.NewEncoder().String(plain)
	if err != nil {
		t.Fatal(err)
	}
	want := []rowWant{{"1", "Crème brûlée – «super»"}, {"É2", "naïve"}}
	for _, name := range []string{"windows-1252", "cp1252", "latin1", "ISO-8859-1"} {
		o := std
		o.Encoding = name
		if rd := checkRows(t, data, o, want); rd.Encoding() != "windows-1252" {
			t.Errorf("%s: encoding %q", name, rd.Encoding())
		}
	}
	// Read as UTF-8 (the default) the same bytes are refused, naming the
	// line and the flag; the row before is still read.
	_, rows, err := readWith(data, std, whole)
	if err == nil || len(rows) != 0 || !strings.Contains(err.Error(), "in.csv:2:") || !strings.Contains(err.Error(), "--encoding windows-1252") {
		t.Fatalf("rows %d, error %v", len(rows), err)
	}
	// Bytes windows-1252 leaves undefined are refused too.
	o := std
	o.Encoding = "windows-1252"
	_, rows, err = readWith("request_id,text\n1,ok\n2,bad \x81 byte\n", o, whole)
	if err == nil || len(rows) != 1 || !strings.Contains(err.Error(), "in.csv:3:") || !strings.Contains(err.Error(), "not valid windows-1252") {
		t.Fatalf("rows %d, error %v", len(rows), err)
	}
}

func TestLookupEncoding(t *testing.T) {
	for name, want := range map[string]string{"": "utf-8", "UTF-8": "utf-8", "utf8": "utf-8", "latin1": "windows-1252",
		"utf-16": "utf-16le", "UTF-16BE": "utf-16be", "shift_jis": "shift_jis", "ISO-8859-15": "iso-8859-15"} {
		e, err := LookupEncoding(name)
		if err != nil || e.Name != want {
			t.Errorf("LookupEncoding(%q) = %q, %v; want %q", name, e.Name, err, want)
		}
	}
	for _, bad := range []string{"klingon", "utf-9", "iso-2022-kr"} {
		_, err := LookupEncoding(bad)
		if err == nil || !strings.Contains(err.Error(), "--encoding") || !strings.Contains(err.Error(), "windows-1252") {
			t.Errorf("LookupEncoding(%q): %v", bad, err)
		}
	}
	if err := (Options{Encoding: "klingon"}).Check(); err == nil {
		t.Error("Check accepted an unknown encoding")
	}
	if err := (Options{Delimiter: '"'}).Check(); err == nil {
		t.Error("Check accepted a quote as the delimiter")
	}
}

func TestInvalidUTF8Refused(t *testing.T) {
	// Far into the input, past the reader's buffers: the rows before it are
	// read (stdin cannot be read twice), then reading stops at its line.
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i := range 5000 {
		b.WriteString("id")
		b.WriteString(strings.Repeat("x", i%5))
		b.WriteString(",\"fine text,\nover two lines\"\n")
	}
	b.WriteString("last,caf\xe9\n")
	for name, wrap := range wraps {
		_, rows, err := readWith(b.String(), std, wrap)
		var ie *Error
		if !errors.As(err, &ie) || ie.Line != 10002 || len(rows) != 5000 || !strings.Contains(err.Error(), "0xE9") {
			t.Fatalf("%s: rows %d, err %v: want 5000 rows then line 10002", name, len(rows), err)
		}
	}
	// In the header, and in a character cut short at the end.
	for _, data := range []string{"request_id,te\xffxt\n1,a\n", "request_id,text\n1,a\xe2\x82"} {
		if _, _, err := readWith(data, std, whole); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("%q: %v", data, err)
		}
	}
	// A real U+FFFD in a UTF-8 file is text like any other.
	checkRows(t, "request_id,text\n1,\uFFFD\n", std, []rowWant{{"1", "\uFFFD"}})
}

func TestLineEnds(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       []rowWant
		lines      []int
	}{
		{"CR only (old Mac)", "request_id,text\r1,a\r2,\"multi\rline\"\r3,b\r",
			[]rowWant{{"1", "a"}, {"2", "multi\rline"}, {"3", "b"}}, []int{2, 3, 4}},
		{"CR only, no last line end", "request_id,text\r1,a\r2,b",
			[]rowWant{{"1", "a"}, {"2", "b"}}, []int{2, 3}},
		{"CRLF inside quotes in an LF file", "request_id,text\n1,\"a\r\nb\"\n2,c\n",
			[]rowWant{{"1", "a\r\nb"}, {"2", "c"}}, []int{2, 4}},
		{"CRLF inside quotes in a CRLF file", "request_id,text\r\n1,\"a\r\n\r\nb\"\r\n2,c\r\n",
			[]rowWant{{"1", "a\r\n\r\nb"}, {"2", "c"}}, []int{2, 5}},
		// Excel: CRLF between records, LF inside a cell.
		{"LF inside quotes in a CRLF file", "request_id,text\r\n1,\"a\nb\"\r\n2,c\r\n",
			[]rowWant{{"1", "a\nb"}, {"2", "c"}}, []int{2, 4}},
		{"a lone CR in an LF file is text", "request_id,text\n1,a\rb\n2,\"c\rd\"\n",
			[]rowWant{{"1", "a\rb"}, {"2", "c\rd"}}, []int{2, 3}},
		{"quoted header with a CRLF", "\"request_id\",\"te\"\"x\r\nt\",text\r\n1,x,y\r\n",
			[]rowWant{{"1", "y"}}, []int{3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkRows(t, c.data, std, c.want)
			_, rows, _ := readWith(c.data, std, whole)
			for i, r := range rows {
				if r.Line != c.lines[i] {
					t.Errorf("row %d at line %d, want %d", i, r.Line, c.lines[i])
				}
			}
		})
	}
}

func TestHeaderChecks(t *testing.T) {
	for _, c := range []struct {
		name, data string
		want       []string
	}{
		{"duplicate text column", "request_id,text,text\n1,a,b\n",
			[]string{"in.csv:1:", `text column "text" 2 times, at columns 2 and 3`, "--text-column"}},
		{"duplicate id column, spaces around", "request_id,text, request_id\n1,a,b\n",
			[]string{`id column "request_id" 2 times, at columns 1 and 3`, "--id-column"}},
		{"close matches for the text column", "request_id,Text,review_text,rating\n1,a,b,5\n",
			[]string{`no text column "text" (--text-column; close matches: "Text", "review_text")`}},
		{"close matches for the id column", "RequestID,text\n1,a\n",
			[]string{`no id column "request_id" (--id-column; close matches: "RequestID")`}},
		{"no close match", "a,b\n1,x\n",
			[]string{`header has no id column "request_id" (--id-column) and no text column "text" (--text-column); columns found: "a", "b"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReader(strings.NewReader(c.data), std)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// A duplicate column that is neither id nor text is fine.
	checkRows(t, "note,request_id,note,text\nx,1,y,a\n", std, []rowWant{{"1", "a"}})
}

func TestIDsKeepTheirSpaces(t *testing.T) {
	checkRows(t, "request_id,text\n  A7 ,a\n\" B8\t\",b\n", std, []rowWant{{"  A7 ", "a"}, {" B8\t", "b"}})
}
