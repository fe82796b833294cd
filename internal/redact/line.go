package redact

import (
	"strings"
	"unicode"
)

// Line makes a server's message safe to keep, write and log: one line
// (line breaks, tabs and other control or format characters become
// spaces, runs of spaces one), invalid UTF-8 replaced, the given secrets
// and anything that looks like a credential redacted (Text), and at most
// max characters, an ellipsis marking the cut. The provider's reasons and
// the Batch API's messages both go through it, so they read alike.
func Line(s string, max int, secrets ...string) string {
	s = Text(strings.ToValidUTF8(s, "\uFFFD"), secrets...)
	var b strings.Builder
	space := false
	n := 0
	for _, r := range s {
		if unicode.IsSpace(r) || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			space = b.Len() > 0
			continue
		}
		if n >= max {
			b.WriteString("…")
			break
		}
		if space {
			b.WriteByte(' ')
			n++
			space = false
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}
