package input

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/agnivade/levenshtein"
)

// sniffable are the delimiters looked for in the header line, in the order
// that breaks a tie.
var sniffable = []rune{',', ';', '\t', '|'}

// ParseDelimiter reads a --delimiter value: one character, or "tab" (or
// `\t`) for a tab, which is awkward to type. "" means sniff it (0).
func ParseDelimiter(s string) (rune, error) {
	switch s {
	case "":
		return 0, nil
	case "tab", `\t`, "TAB":
		return '\t', nil
	}
	r, size := utf8.DecodeRuneInString(s)
	if size != len(s) {
		return 0, fmt.Errorf("--delimiter %q: want one character, such as ';' or '|', or tab", s)
	}
	if err := checkDelimiter(r); err != nil {
		return 0, err
	}
	return r, nil
}

func checkDelimiter(r rune) error {
	if r == '"' || r == '\r' || r == '\n' || r == 0 || r == utf8.RuneError || !utf8.ValidRune(r) {
		return fmt.Errorf("--delimiter %q: a quote, a line end or NUL cannot separate fields; want a character such as ',' ';' '|' or tab", string(r))
	}
	return nil
}

// DelimiterName is how a delimiter is shown in messages and logs.
func DelimiterName(r rune) string {
	if r == '\t' {
		return "tab"
	}
	return string(r)
}

// peekHeader returns the first line, up to its line end (LF outside quotes;
// prep has already turned CR-only line ends into LF), or what there is of
// it when it fills br's buffer or the input ends. It reads no more than it
// must, so a slow pipe's first line is enough.
func peekHeader(br *bufio.Reader) []byte {
	from, inQuote := 0, false
	for want := 1; ; {
		b, err := br.Peek(want)
		// Look at everything already read before asking for more: a pipe
		// may have sent the whole header and then nothing for a while.
		if n := br.Buffered(); n > len(b) {
			b, _ = br.Peek(n)
		}
		for i := from; i < len(b); i++ {
			switch b[i] {
			case '"':
				inQuote = !inQuote
			case '\n':
				if !inQuote {
					return b[:i]
				}
			}
		}
		from = len(b)
		if err != nil || len(b) >= br.Size() {
			return b
		}
		want = len(b) + 1
	}
}

// sniffDelimiter chooses the header's delimiter among sniffable: the one
// that splits it into fields naming both wanted columns, else the most
// frequent outside quotes, else a comma (a one-column header).
func sniffDelimiter(line []byte, idCol, textCol string) rune {
	counts := make(map[rune]int, len(sniffable))
	inQuote := false
	for _, c := range line {
		switch {
		case c == '"':
			inQuote = !inQuote
		case !inQuote && (c == ',' || c == ';' || c == '\t' || c == '|'):
			counts[rune(c)]++
		}
	}
	best, bestFits := ',', false
	for _, d := range sniffable {
		if counts[d] == 0 {
			continue
		}
		if fits := namesBoth(line, d, idCol, textCol); (fits && !bestFits) || (fits == bestFits && counts[d] > counts[best]) {
			best, bestFits = d, fits
		}
	}
	return best
}

func namesBoth(line []byte, d rune, idCol, textCol string) bool {
	cr := csv.NewReader(bytes.NewReader(line))
	cr.Comma = d
	cr.FieldsPerRecord = -1
	rec, err := cr.Read()
	if err != nil {
		return false
	}
	var id, text bool
	for _, h := range rec {
		h = strings.TrimSpace(h)
		id = id || h == idCol
		text = text || h == textCol
	}
	return id && text
}

// columns finds the id and text columns in the header, or says why not.
func (r *Reader) columns(header []string) error {
	o := r.opts
	names := make([]string, len(header))
	for i, h := range header {
		names[i] = strings.TrimSpace(h)
	}
	ids, texts := positions(names, o.IDColumn), positions(names, o.TextColumn)
	if len(names) == 1 && (len(ids) == 0 || len(texts) == 0) {
		for _, d := range sniffable {
			if d != r.delim && strings.ContainsRune(names[0], d) {
				return &Error{Name: o.Name, Line: 1, Msg: fmt.Sprintf("the header is one column, %s, which holds %q: the fields seem to be separated by %q, not %q; set the delimiter with --delimiter %s",
					clip(names[0]), DelimiterName(d), DelimiterName(d), DelimiterName(r.delim), shellQuote(DelimiterName(d)))}
			}
		}
	}
	for _, c := range []struct {
		what, name, flag string
		at               []int
	}{{"id", o.IDColumn, "--id-column", ids}, {"text", o.TextColumn, "--text-column", texts}} {
		if len(c.at) > 1 {
			return &Error{Name: o.Name, Line: 1, Msg: fmt.Sprintf("header has the %s column %q %d times, at columns %s (counting from 1): rename all but one, or choose another column with %s",
				c.what, c.name, len(c.at), joinInts(c.at), c.flag)}
		}
	}
	var missing []string
	if len(ids) == 0 {
		missing = append(missing, "id column "+quote(o.IDColumn)+" (--id-column"+suggest(o.IDColumn, names)+")")
	}
	if len(texts) == 0 {
		missing = append(missing, "text column "+quote(o.TextColumn)+" (--text-column"+suggest(o.TextColumn, names)+")")
	}
	if len(missing) > 0 {
		msg := "header has no " + strings.Join(missing, " and no ") + "; columns found: " + describeHeader(header)
		if strings.ContainsRune(strings.Join(header, ""), 0) {
			msg += "; the NUL bytes suggest UTF-16 without a byte-order mark: try --encoding utf-16le (or utf-16be)"
		}
		return &Error{Name: o.Name, Line: 1, Msg: msg}
	}
	r.idIdx, r.textIdx = ids[0]-1, texts[0]-1
	var err error
	if r.clientIdx, err = r.optional(names, header, "client", o.ClientColumn, "--client-column"); err != nil {
		return err
	}
	r.goldIdx, err = r.optional(names, header, "gold", o.GoldColumn, "--gold-column")
	return err
}

// optional finds a column that must be there once when a flag names it:
// its index from 0, or -1 when the flag is not set.
func (r *Reader) optional(names, header []string, what, name, flag string) (int, error) {
	if name == "" {
		return -1, nil
	}
	o := r.opts
	at := positions(names, name)
	switch {
	case len(at) == 0:
		return -1, &Error{Name: o.Name, Line: 1, Msg: "header has no " + what + " column " + quote(name) + " (" + flag + suggest(name, names) + "); columns found: " + describeHeader(header)}
	case len(at) > 1:
		return -1, &Error{Name: o.Name, Line: 1, Msg: fmt.Sprintf("header has the %s column %q %d times, at columns %s (counting from 1): rename all but one, or choose another column with %s",
			what, name, len(at), joinInts(at), flag)}
	}
	return at[0] - 1, nil
}

// positions are the columns, from 1, whose name is want.
func positions(names []string, want string) []int {
	var at []int
	for i, n := range names {
		if n == want {
			at = append(at, i+1)
		}
	}
	return at
}

// suggest names the header's columns that are close to want, as a hint in
// an error: matching stays exact, but "Text" or "review_text" for "text"
// is most likely what was meant.
func suggest(want string, names []string) string {
	w := normName(want)
	type cand struct {
		name string
		dist int
	}
	var cands []cand
	for _, n := range names {
		h := normName(n)
		if n == "" || h == "" || slices.ContainsFunc(cands, func(c cand) bool { return c.name == n }) {
			continue
		}
		d := levenshtein.ComputeDistance(h, w)
		switch {
		case h == w:
			d = 0
		case len(w) >= 2 && strings.Contains(h, w), len(h) >= 2 && strings.Contains(w, h):
			d = 1 + d/10 // a longer or shorter name around the same word
		case d <= 1+utf8.RuneCountInString(w)/5:
		default:
			continue
		}
		cands = append(cands, cand{n, d})
	}
	if len(cands) == 0 {
		return ""
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return a.dist - b.dist })
	if len(cands) > 3 {
		cands = cands[:3]
	}
	q := make([]string, len(cands))
	for i, c := range cands {
		q[i] = quote(c.name)
	}
	return "; close matches: " + strings.Join(q, ", ")
}

// normName folds case and drops separators: "Request ID", "request-id" and
// "RequestId" are all "requestid".
func normName(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '_', '-', '.':
			return -1
		}
		return r
	}, strings.ToLower(strings.TrimSpace(s)))
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	if len(s) == 2 {
		return s[0] + " and " + s[1]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func clip(s string) string {
	if len(s) > 60 {
		cut := 60
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return quote(s[:cut]) + "..."
	}
	return quote(s)
}

func shellQuote(s string) string {
	if s == "tab" {
		return s
	}
	return "'" + s + "'"
}
