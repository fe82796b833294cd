// Package redact shows URLs without the credentials they may carry: an
// --endpoint may hold a user and password, or a key in its query
// (?api_key=...), and neither may reach a terminal, a log or a file.
package redact

import (
	"net/url"
	"strings"
)

// Mark stands where a credential was.
const Mark = "REDACTED"

// URL returns s with its userinfo (user:password@) replaced by REDACTED@,
// every query value replaced by REDACTED (a query item with no = in it is
// replaced whole: it may be a bare key) and any fragment replaced by
// REDACTED. Scheme, host, port, path and query names are kept, so the
// result still says where the call goes.
//
// s need not be a valid URL: an error message must be able to name the very
// endpoint that does not parse. A URL that net/url parses is cut where
// net/url cuts it (the userinfo ends at the authority's last "@"). One that
// does not parse may hold a password with a "/", "?" or "#" typed as is, so
// everything up to its last "@" is hidden: less is shown, nothing leaks.
func URL(s string) string {
	u, err := url.Parse(s)
	strict := err == nil && u.Opaque == ""

	var b strings.Builder
	b.Grow(len(s) + len(Mark))
	rest := s
	if i := strings.Index(rest, "://"); i >= 0 && !strings.ContainsAny(rest[:i], "/?#@") {
		b.WriteString(rest[:i+3])
		rest = rest[i+3:]
	} else if strings.HasPrefix(rest, "//") {
		b.WriteString("//")
		rest = rest[2:]
	}
	if strict {
		end := indexOrLen(rest, "/?#")
		if at := strings.LastIndexByte(rest[:end], '@'); at >= 0 {
			rest = Mark + rest[at:]
		}
	} else if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		rest = Mark + rest[at:]
	}

	end := indexOrLen(rest, "?#")
	b.WriteString(rest[:end])
	rest = rest[end:]

	if q, ok := strings.CutPrefix(rest, "?"); ok {
		frag := ""
		if i := strings.IndexByte(q, '#'); i >= 0 {
			q, frag = q[:i], q[i:]
		}
		b.WriteByte('?')
		for i, item := range strings.Split(q, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			switch name, _, hasValue := strings.Cut(item, "="); {
			case hasValue:
				b.WriteString(name + "=" + Mark)
			case item != "":
				b.WriteString(Mark)
			}
		}
		rest = frag
	}
	if rest != "" { // a fragment: never sent, but it may hold a token too
		b.WriteString("#" + Mark)
	}
	return b.String()
}

func indexOrLen(s, chars string) int {
	if i := strings.IndexAny(s, chars); i >= 0 {
		return i
	}
	return len(s)
}
