package input

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t *testing.T, data string, opts Options) ([]Row, error) {
	t.Helper()
	rd, err := NewReader(strings.NewReader(data), opts)
	if err != nil {
		return nil, err
	}
	var rows []Row
	for {
		r, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rows, nil
		}
		if err != nil {
			return rows, err
		}
		rows = append(rows, r)
	}
}

var std = Options{Name: "in.csv", IDColumn: "request_id", TextColumn: "text"}

func TestQuotingBOMAndCRLF(t *testing.T) {
	data := "\uFEFFrequest_id,extra,text\r\n" +
		"a1,x,\"Hello, \"\"world\"\"\"\r\n" +
		"a2,y,\"two\r\nlines\"\r\n" +
		"a3,z,plain\r\n"
	rows, err := readAll(t, data, std)
	if err != nil {
		t.Fatal(err)
	}
	want := []Row{
		{Seq: 0, Line: 2, ID: "a1", Text: `Hello, "world"`},
		{Seq: 1, Line: 3, ID: "a2", Text: "two\r\nlines"}, // CRLF kept as it was
		{Seq: 2, Line: 5, ID: "a3", Text: "plain"},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows: %+v", len(rows), rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
}

func TestColumnsByName(t *testing.T) {
	rows, err := readAll(t, "body,id\nhi,7\n", Options{Name: "x", IDColumn: "id", TextColumn: "body"})
	if err != nil || len(rows) != 1 || rows[0].ID != "7" || rows[0].Text != "hi" {
		t.Fatalf("%+v %v", rows, err)
	}
}

func TestFieldCount(t *testing.T) {
	rows, err := readAll(t, "request_id,text\nr1,ok\nr2,too,many\nr3\n", std)
	if err != nil {
		t.Fatal(err)
	}
	if rows[0].Problem != "" || !strings.Contains(rows[1].Problem, "3 fields") {
		t.Fatalf("field count: %+v", rows[:2])
	}
	if rows[2].Text != "" || rows[2].Problem != "" {
		t.Fatalf("a short record has a blank text (invalid later), got %+v", rows[2])
	}
}

func TestFileErrorsNameFileAndLine(t *testing.T) {
	cases := []struct {
		name, data, want string
	}{
		{"empty", "", "in.csv: is empty"},
		{"header only", "request_id,text\n", "in.csv: has a header but no rows"},
		{"missing text column", "request_id,body\n1,x\n", `in.csv:1: header has no text column "text"`},
		{"missing both", "a,b\n1,x\n", `no id column "request_id" (--id-column) and no text column`},
		{"bad quote in header", "request_id,te\"xt\n", "in.csv:1:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewReader(strings.NewReader(c.data), std)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
		})
	}
	rows, err := readAll(t, "request_id,text\n1,ok\n2,\"unclosed\n3,x\n", std)
	var ie *Error
	if !errors.As(err, &ie) || ie.Line != 3 || !strings.HasPrefix(err.Error(), "in.csv:") || len(rows) != 1 {
		t.Fatalf("rows %d, err %v: want the line of the bad record and the rows before it", len(rows), err)
	}
	rows, err = readAll(t, "request_id,text\n1,ok\n2,a\"b\n", std)
	if !errors.As(err, &ie) || ie.Line != 3 || len(rows) != 1 {
		t.Fatalf("bare quote: rows %d, err %v", len(rows), err)
	}
}

func TestCount(t *testing.T) {
	n, err := Count(strings.NewReader("request_id,text\n1,a\n2,\"b\nc\"\n3,d\n"), std)
	if err != nil || n != 3 {
		t.Fatalf("Count = %d, %v", n, err)
	}
}

// FuzzReader feeds arbitrary bytes as a CSV file, with each delimiter
// (or sniffing) and each kind of encoding: the reader must never panic,
// every row it yields must carry valid UTF-8 and increasing sequence numbers
// and lines, errors must name the file, and reading one byte at a time must
// give exactly the same rows and error as reading in large blocks (the
// line-end and validation pass works across block boundaries).
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"request_id,text\n1,hello\n",
		"\uFEFFrequest_id,text\r\n1,\"a,\"\"b\"\"\"\r\n2,\"multi\nline\"\r\n",
		"request_id,text\n1,a,b,c\n2\n",
		"text,request_id\n\"x\",\"y\n",
		"request_id,text\n1,\xff\xfe\n",
		"request_id;text\r1;\"a\rb\"\r2;\"c\r\nd\"\r",
		"request_id\ttext\n 1 \tx\n",
		"\xff\xfer\x00e\x00q\x00u\x00e\x00s\x00t\x00_\x00i\x00d\x00\t\x00t\x00e\x00x\x00t\x00\r\x00\n\x001\x00\t\x00\xe9\x00\r\x00\n\x00",
		"request_id|text|text\n1|a|b\n",
		"",
		"\"",
	} {
		f.Add([]byte(s), uint8(0), uint8(0))
	}
	delims := []rune{0, ',', ';', '\t', '|', ' '}
	encs := []string{"", "windows-1252", "utf-16le", "utf-16be", "shift_jis"}
	f.Fuzz(func(t *testing.T, data []byte, d, e uint8) {
		opts := std
		opts.Delimiter = delims[int(d)%len(delims)]
		opts.Encoding = encs[int(e)%len(encs)]
		block, blockErr := readFuzz(t, iotest.OneByteReader(strings.NewReader(string(data))), opts)
		rows, err := readFuzz(t, strings.NewReader(string(data)), opts)
		if fmt.Sprint(err) != fmt.Sprint(blockErr) || len(rows) != len(block) {
			t.Fatalf("one byte at a time: %d rows, %v; in blocks: %d rows, %v", len(block), blockErr, len(rows), err)
		}
		for i := range rows {
			if rows[i] != block[i] {
				t.Fatalf("row %d one byte at a time %+v, in blocks %+v", i, block[i], rows[i])
			}
		}
	})
}

func readFuzz(t *testing.T, r io.Reader, opts Options) ([]Row, error) {
	rd, err := NewReader(r, opts)
	if err != nil {
		if !strings.HasPrefix(err.Error(), "in.csv") {
			t.Fatalf("error does not name the file: %v", err)
		}
		return nil, err
	}
	var rows []Row
	for i := 0; ; i++ {
		r, err := rd.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !strings.HasPrefix(err.Error(), "in.csv") {
				t.Fatalf("error does not name the file: %v", err)
			}
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return rows, err
		}
		if r.Seq != int64(i) || (i > 0 && r.Line <= rows[i-1].Line) {
			t.Fatalf("row %d: seq %d line %d after line %d", i, r.Seq, r.Line, rows[i-1].Line)
		}
		if !validUTF8(r.ID) || !validUTF8(r.Text) {
			t.Fatalf("invalid UTF-8 passed through: %q %q", r.ID, r.Text)
		}
		rows = append(rows, r)
	}
}

func validUTF8(s string) bool { return strings.ToValidUTF8(s, "") == s }

func benchData(delim string) string {
	var sb strings.Builder
	sb.WriteString("request_id" + delim + "text\n")
	for i := range 10000 {
		sb.WriteString("id")
		sb.WriteString(strings.Repeat("x", i%7))
		sb.WriteString(delim + "\"The repair was quick, and the staff were friendly.\"\n")
	}
	return sb.String()
}

func BenchmarkReader(b *testing.B) {
	data := benchData(",")
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if _, err := Count(strings.NewReader(data), std); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReaderDecoded reads a semicolon file through a decoder (the
// path a windows-1252 file takes).
func BenchmarkReaderDecoded(b *testing.B) {
	data := benchData(";")
	opts := std
	opts.Encoding = "windows-1252"
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if _, err := Count(strings.NewReader(data), opts); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReaderRows reads every row (Count only parses).
func BenchmarkReaderRows(b *testing.B) {
	data := benchData(",")
	b.SetBytes(int64(len(data)))
	b.ResetTimer()
	for range b.N {
		if _, _, err := readWith(data, std, whole); err != nil {
			b.Fatal(err)
		}
	}
}
