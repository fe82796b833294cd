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
	if strings.TrimSpace(row.Text) == "" {
		return "blank text"
	}
	maxChars := r.MaxChars
	if maxChars <= 0 {
		maxChars = 5000
	}
	// Counting runes stops early: a 1 MiB text is not counted to its end.
	if len(row.Text) > maxChars {
		if n := utf8.RuneCountInString(row.Text); n > maxChars {
			return fmt.Sprintf("text has %d characters, over --max-chars %d", n, maxChars)
		}
	}
	return ""
}
