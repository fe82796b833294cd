package engine

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/hfsent/hfsent/internal/input"
)

// Rules decide which rows are invalid_input: never sent, whoever brought
// them (a CSV row, an HTTP request, a queue push).
type Rules struct {
	// MaxChars bounds a text, in characters; default 5000.
	MaxChars int
	// MaxIDChars bounds an id, in characters; 0: no bound.
	MaxIDChars int
	// IDPattern, when set, must match the whole id.
	IDPattern *regexp.Regexp
}

// Check returns why row is invalid, or "". seen, when not nil, reports
// whether the id came before (and remembers it): a later row with the same
// id is invalid. seen is given the id without surrounding spaces, so "A7"
// and " A7 " are the same id.
func (r Rules) Check(row input.Row, seen func(id string) bool) string {
	if row.Problem != "" {
		return row.Problem
	}
	id := strings.TrimSpace(row.ID)
	if id == "" {
		return "missing request id"
	}
	if r.MaxIDChars > 0 {
		if n := utf8.RuneCountInString(id); n > r.MaxIDChars {
			return fmt.Sprintf("request id has %d characters, over %d", n, r.MaxIDChars)
		}
	}
	if r.IDPattern != nil && !r.IDPattern.MatchString(id) {
		return fmt.Sprintf("request id does not match --id-pattern %s", r.IDPattern)
	}
	if seen != nil && seen(id) {
		return "duplicate request id"
	}
	// A text the reader cut (row.TextChars) was over the limit, whatever
	// its first characters are.
	if row.TextChars == 0 && strings.TrimSpace(row.Text) == "" {
		return "blank text"
	}
	maxChars := r.MaxChars
	if maxChars <= 0 {
		maxChars = input.DefaultMaxChars
	}
	n := row.TextChars
	// A text no longer in bytes than the limit is within it in characters.
	if n == 0 && len(row.Text) > maxChars {
		n = int64(utf8.RuneCountInString(row.Text))
	}
	// A cut text never passes, even under a larger limit than the reader's.
	if row.TextChars > 0 || n > int64(maxChars) {
		return fmt.Sprintf("text has %d characters, over --max-chars %d", n, maxChars)
	}
	return ""
}
