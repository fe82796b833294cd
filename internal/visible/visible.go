// Package visible tells whether a string given by an operator shows as it
// is: a batch's or a budget's name in a table, a label written to the
// results and sent in a prompt. One rule for all of them, so that a name
// refused in one place is refused in every other.
package visible

import "unicode"

// Hidden is the first character of s that would not show as itself on a
// terminal, in a table or in a spreadsheet cell, and its index in
// characters (0-based); i is -1 when every character shows. Such a
// character is a control character (a newline, an ANSI escape), a format
// character (a zero-width space or joiner, a bidirectional override, a
// soft hyphen), or a line or paragraph separator: each can forge a line,
// run an escape, or make two different strings look the same.
func Hidden(s string) (r rune, i int) {
	i = 0
	for _, r := range s {
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
			return r, i
		}
		i++
	}
	return 0, -1
}
