package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/unicode"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// The CSVs people actually have (Excel, CRMs, survey tools), each written by
// the test and read end to end by the binary: the texts the fake provider
// received and the texts written back with --include-text must be the
// input's, byte for byte.

type pair struct{ id, text string }

// classifyFile runs classify on data (written to a file, or given on stdin
// when stdin is set) against a fresh fake provider, with --include-text.
type fileRun struct {
	code   int
	stderr string
	out    []byte // the results file, raw
	fake   *fakehf.Fake
}

func classifyFile(t *testing.T, data []byte, stdin bool, args ...string) fileRun {
	t.Helper()
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(in, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.csv")
	src := in
	if stdin {
		src = "-"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, append([]string{"classify", src, "-o", out, "--endpoint", srv.URL,
		"--include-text", "--no-progress", "--retries", "0"}, args...)...)
	if stdin {
		cmd.Stdin = bytes.NewReader(data)
	}
	if err := cmd.Run(); err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("running hfsent: %v", err)
		}
	}
	raw, _ := os.ReadFile(out)
	return fileRun{code: cmd.ProcessState.ExitCode(), stderr: stderr.String(), out: raw, fake: fake}
}

// expectExact checks a successful run: one result per pair, in order, with
// the id and the text exactly as in the input, and each text sent as it is.
func expectExact(t *testing.T, r fileRun, want []pair) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows := parseRaw(t, r.out)
	if len(rows) != len(want) {
		t.Fatalf("%d result rows, want %d:\n%q", len(rows), len(want), r.out)
	}
	seen := r.fake.Seen()
	for i, w := range want {
		got := rows[i]
		if got["request_id"] != w.id || got["text"] != w.text || got["outcome"] != "success" {
			t.Errorf("row %d: id %q text %q outcome %s (%s); want id %q text %q",
				i, got["request_id"], got["text"], got["outcome"], got["error"], w.id, w.text)
		}
		if seen[w.text] != 1 {
			t.Errorf("text %q was sent %d times; the provider got: %v", w.text, seen[w.text], seen)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("the provider got %d distinct texts, want %d: %v", len(seen), len(want), seen)
	}
}

// parseRaw reads a results file byte for byte. encoding/csv would turn a
// CRLF inside a quoted field into LF, hiding exactly what is tested here,
// so the quoted fields are read by hand: the results writer quotes a field
// when it must, doubling its quotes, and ends records with LF.
func parseRaw(t *testing.T, b []byte) []map[string]string {
	t.Helper()
	var recs [][]string
	var rec []string
	var field strings.Builder
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"' && field.Len() == 0:
			for i++; ; i++ {
				if i >= len(b) {
					t.Fatalf("unterminated quoted field in:\n%q", b)
				}
				if b[i] == '"' {
					if i+1 < len(b) && b[i+1] == '"' {
						field.WriteByte('"')
						i++
						continue
					}
					break
				}
				field.WriteByte(b[i])
			}
		case c == ',':
			rec = append(rec, field.String())
			field.Reset()
		case c == '\n':
			recs = append(recs, append(rec, field.String()))
			rec, field = nil, strings.Builder{}
		default:
			field.WriteByte(c)
		}
	}
	if len(recs) == 0 || recs[0][0] != "request_id" {
		t.Fatalf("no results header in:\n%q", b)
	}
	var rows []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			if i < len(r) {
				m[h] = r[i]
			}
		}
		rows = append(rows, m)
	}
	return rows
}

var feedback = []pair{
	{"A-1", "Très bien, merci! The repair was quick"},
	{"A-2", "Naïve «quotes» and \"double\" ones; even | pipes"},
	{"A-3", "Çà et là – € 12,50"},
}

// csvOf writes pairs as a CSV with the given delimiter and line end,
// quoting every text.
func csvOf(delim, eol string, rows []pair) string {
	var b strings.Builder
	b.WriteString("request_id" + delim + "text" + eol)
	for _, r := range rows {
		b.WriteString(r.id + delim + `"` + strings.ReplaceAll(r.text, `"`, `""`) + `"` + eol)
	}
	return b.String()
}

func TestSemicolonExcelCSV(t *testing.T) {
	// European Excel's "CSV UTF-8": a BOM, semicolons, CRLF.
	data := "\uFEFF" + csvOf(";", "\r\n", feedback)
	r := classifyFile(t, []byte(data), false, "--log-level", "debug")
	expectExact(t, r, feedback)
	if !strings.Contains(r.stderr, "delimiter=; sniffed=true") {
		t.Errorf("the sniffed delimiter is not logged at debug level:\n%s", r.stderr)
	}
}

func TestTSV(t *testing.T) {
	expectExact(t, classifyFile(t, []byte(csvOf("\t", "\n", feedback)), false), feedback)
}

func TestPipeSeparated(t *testing.T) {
	expectExact(t, classifyFile(t, []byte(csvOf("|", "\n", feedback)), false), feedback)
}

func TestDelimiterFlag(t *testing.T) {
	// A delimiter the sniffer does not look for.
	want := []pair{{"1", "x, y; z"}, {"2", "a:b"}}
	r := classifyFile(t, []byte(csvOf(":", "\n", want)), false, "--delimiter", ":")
	expectExact(t, r, want)
	r = classifyFile(t, []byte(csvOf("\t", "\n", want)), false, "--delimiter", "tab")
	expectExact(t, r, want)
	// A comma forced on a semicolon file: refused, naming the flag.
	r = classifyFile(t, []byte(csvOf(";", "\n", feedback)), false, "--delimiter", ",")
	if r.code != 2 || !strings.Contains(r.stderr, "in.csv:1:") || !strings.Contains(r.stderr, "--delimiter ';'") || r.fake.Calls() != 0 {
		t.Fatalf("exit %d, calls %d: %s", r.code, r.fake.Calls(), r.stderr)
	}
}

func TestExcelUnicodeText(t *testing.T) {
	// Excel's "Unicode Text": UTF-16 LE with a BOM, tabs, CRLF.
	data, err := unicode.UTF16(unicode.LittleEndian, unicode.UseBOM).NewEncoder().String(csvOf("\t", "\r\n", feedback))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(data, "\xFF\xFE") {
		t.Fatal("no BOM written")
	}
	expectExact(t, classifyFile(t, []byte(data), false), feedback)
}

func TestUTF16BigEndian(t *testing.T) {
	data, err := unicode.UTF16(unicode.BigEndian, unicode.UseBOM).NewEncoder().String(csvOf(",", "\n", feedback))
	if err != nil {
		t.Fatal(err)
	}
	expectExact(t, classifyFile(t, []byte(data), false), feedback)
}

func TestWindows1252(t *testing.T) {
	want := append([]pair{{"É-4", "accented id"}}, feedback...)
	data, err := charmap.Windows1252.NewEncoder().String(csvOf(";", "\r\n", want))
	if err != nil {
		t.Fatal(err)
	}
	expectExact(t, classifyFile(t, []byte(data), false, "--encoding", "windows-1252"), want)
	// latin1 names the same (WHATWG) encoding.
	expectExact(t, classifyFile(t, []byte(data), false, "--encoding", "latin1"), want)
}

func TestInvalidBytesRefused(t *testing.T) {
	// A windows-1252 file read as UTF-8 (the default): refused before any
	// call, naming the line and the flag; nothing is replaced by U+FFFD.
	data, _ := charmap.Windows1252.NewEncoder().String(csvOf(",", "\n", []pair{{"1", "fine"}, {"2", "also fine"}, {"3", "café"}}))
	r := classifyFile(t, []byte(data), false)
	if r.code != 2 || !strings.Contains(r.stderr, "in.csv:4:") || !strings.Contains(r.stderr, "--encoding windows-1252") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if r.fake.Calls() != 0 {
		t.Fatalf("%d calls made for a file that is refused", r.fake.Calls())
	}
	// On stdin, which cannot be read twice: the rows before the bad line
	// are processed and written, reading stops there, exit 2.
	r = classifyFile(t, []byte(data), true)
	if r.code != 2 || !strings.Contains(r.stderr, "stdin:4:") || !strings.Contains(r.stderr, "--encoding windows-1252") {
		t.Fatalf("stdin: exit %d: %s", r.code, r.stderr)
	}
	rows := parseRaw(t, r.out)
	if len(rows) != 2 || rows[0]["text"] != "fine" || rows[1]["text"] != "also fine" {
		t.Fatalf("stdin: the rows before the bad line are not all there: %q", r.out)
	}
	if bytes.Contains(r.out, []byte("\uFFFD")) {
		t.Fatal("a replacement character was written")
	}
}

func TestCROnlyLineEnds(t *testing.T) {
	// Old-Mac line ends, including one inside a quoted text.
	want := []pair{{"1", "plain"}, {"2", "two\rlines"}, {"3", "last, no line end after it"}}
	data := strings.TrimSuffix(csvOf(",", "\r", want), "\r")
	expectExact(t, classifyFile(t, []byte(data), false), want)
}

func TestCRLFInsideQuotesPreserved(t *testing.T) {
	want := []pair{{"1", "first line\r\nsecond line"}, {"2", "an Excel cell\nwith LF"}, {"3", "blank\r\n\r\nline"}}
	for _, eol := range []string{"\r\n", "\n"} {
		r := classifyFile(t, []byte(csvOf(",", eol, want)), false)
		expectExact(t, r, want)
		if !bytes.Contains(r.out, []byte("\"first line\r\nsecond line\"")) || !bytes.Contains(r.out, []byte("\"blank\r\n\r\nline\"")) {
			t.Fatalf("CRLF inside a text not written back as CRLF:\n%q", r.out)
		}
	}
}

func TestDuplicateHeaderColumns(t *testing.T) {
	r := classifyFile(t, []byte("request_id,text,score,text\n1,a,5,b\n"), false)
	if r.code != 2 || !strings.Contains(r.stderr, "in.csv:1:") || !strings.Contains(r.stderr, `"text" 2 times, at columns 2 and 4`) || r.fake.Calls() != 0 {
		t.Fatalf("exit %d, calls %d: %s", r.code, r.fake.Calls(), r.stderr)
	}
}

func TestCloseMatchSuggestions(t *testing.T) {
	r := classifyFile(t, []byte("request_id,Text,review_text,rating\n1,a,b,5\n"), false)
	if r.code != 2 || !strings.Contains(r.stderr, `no text column "text" (--text-column; close matches: "Text", "review_text")`) || r.fake.Calls() != 0 {
		t.Fatalf("exit %d, calls %d: %s", r.code, r.fake.Calls(), r.stderr)
	}
}

func TestIDsWrittenExactly(t *testing.T) {
	data := "request_id,text\n\"  A7 \",first\nB8\t,second\nA7,third\n"
	r := classifyFile(t, []byte(data), false)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (one duplicate): %s", r.code, r.stderr)
	}
	rows := parseRaw(t, r.out)
	want := []struct{ id, outcome, err string }{
		{"  A7 ", "success", ""}, {"B8\t", "success", ""}, {"A7", "invalid_input", "duplicate request id"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows: %q", len(rows), r.out)
	}
	for i, w := range want {
		if rows[i]["request_id"] != w.id || rows[i]["outcome"] != w.outcome || rows[i]["error"] != w.err {
			t.Errorf("row %d: %q %s %q, want %q %s %q", i, rows[i]["request_id"], rows[i]["outcome"], rows[i]["error"], w.id, w.outcome, w.err)
		}
	}
}

func TestBadInputFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--delimiter", ";;"}, "--delimiter"},
		{[]string{"--delimiter", `"`}, "--delimiter"},
		{[]string{"--encoding", "klingon"}, "windows-1252"},
	} {
		r := classifyFile(t, []byte(csvOf(",", "\n", feedback)), false, c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) || r.fake.Calls() != 0 {
			t.Errorf("%v: exit %d, calls %d: %s", c.args, r.code, r.fake.Calls(), r.stderr)
		}
	}
}

// --resume lines the old results up with the input by id: ids written as
// read (spaces kept) still match, and reading the input another way
// (another --encoding) is refused.
func TestResumeRealFile(t *testing.T) {
	fake := &fakehf.Fake{}
	srv := fakehf.Start(fake)
	defer srv.Close()
	dir := t.TempDir()
	want := []pair{{"  A7 ", "Très bien"}, {"B8", "naïve"}, {" C9", "ça va"}}
	data, _ := charmap.Windows1252.NewEncoder().String(csvOf(";", "\r\n", want))
	in := filepath.Join(dir, "in.csv")
	if err := os.WriteFile(in, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.csv")
	args := []string{"classify", in, "-o", out, "--endpoint", srv.URL, "--no-progress", "--retries", "0", "--include-text", "--encoding", "windows-1252"}
	if code, e := run(t, args...); code != 0 {
		t.Fatalf("exit %d: %s", code, e)
	}
	before, _ := os.ReadFile(out)
	expectExact(t, fileRun{out: before, fake: fake}, want)
	if code, e := run(t, append(args, "--resume")...); code != 0 {
		t.Fatalf("--resume: exit %d: %s", code, e)
	}
	after, _ := os.ReadFile(out)
	if fake.Calls() != 3 || !bytes.Equal(before, after) {
		t.Fatalf("--resume of a finished run made %d calls in all (want 3) or changed the results:\n%q\n%q", fake.Calls(), before, after)
	}
	code, e := run(t, append(args, "--resume", "--encoding", "iso-8859-15")...)
	if code != 2 || !strings.Contains(e, "encoding windows-1252") || !strings.Contains(e, "--encoding") {
		t.Fatalf("--resume with another --encoding: exit %d: %s", code, e)
	}
}
