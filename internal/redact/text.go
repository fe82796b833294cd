package redact

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokenLike matches what looks like a credential in free text: a Hugging
// Face token (hf_...), an OpenAI-style key (sk-...), and the value after
// "Bearer ".
// A key a server quotes masked (OpenAI: "sk-proj-****...abcd") still shows
// its first and last characters: it is redacted whole too.
var tokenLike = regexp.MustCompile(`\b(?:hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{16,}|(?:sk|hf)[-_][A-Za-z0-9_-]*\*{3,}[A-Za-z0-9_*-]*)|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,}`)

// urlLike matches a URL in free text, up to the first space or quote.
var urlLike = regexp.MustCompile(`(?i)\bhttps?://[^\s"'<>]+`)

// minEncoded is the shortest secret whose encodings are looked for too:
// the pieces of base64 a shorter one leaves could match ordinary text.
const minEncoded = 8

// Text returns s with every secret given (the token in use, say), anything
// that looks like a token, and the credentials of any URL in it replaced by
// REDACTED. It is for text that comes from outside (a server's error
// message) before it is shown or written.
//
// A secret is found as it is and in any case (a server that upper-cases
// what it echoes), and, when it has at least minEncoded bytes, in the
// encodings a server may echo it in: percent-encoded (as a query value or
// a path), hex, and base64 (standard and URL-safe, padded or not, and
// inside a longer base64 text such as an encoded "Bearer KEY" or
// "user:KEY" header, at each of its three alignments).
func Text(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) < 4 {
			continue
		}
		s = replaceFold(s, sec)
		if len(sec) < minEncoded {
			continue
		}
		for _, enc := range []string{url.QueryEscape(sec), url.PathEscape(sec), hex.EncodeToString([]byte(sec))} {
			s = replaceFold(s, enc)
		}
		for _, enc := range base64Forms(sec) {
			s = strings.ReplaceAll(s, enc, Mark)
		}
	}
	s = tokenLike.ReplaceAllStringFunc(s, func(m string) string {
		if strings.HasPrefix(strings.ToLower(m), "bearer") {
			return "Bearer " + Mark
		}
		return Mark
	})
	return urlLike.ReplaceAllStringFunc(s, URL)
}

// base64Forms are the ways sec shows in base64, the whole encodings first
// (so that their padding goes too): alone, padded or not, in both
// alphabets; then, for a text in which sec starts 0, 1 or 2 bytes into a
// group of three, the characters that depend on sec's bytes alone (at most
// the one character on each side that mixes in a neighbour's bits, six
// bits of sec, stays).
func base64Forms(sec string) []string {
	var out []string
	for _, e := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		out = append(out, e.EncodeToString([]byte(sec)))
	}
	for k := range 3 {
		enc := base64.RawStdEncoding.EncodeToString(append(make([]byte, k), sec...))
		// Character j holds bits [6j, 6j+6); sec's are [8k, 8(k+len)).
		frag := enc[(8*k+5)/6 : 8*(k+len(sec))/6]
		out = append(out, frag, strings.NewReplacer("+", "-", "/", "_").Replace(frag))
	}
	return out
}

// replaceFold replaces every occurrence of old in s, in any case (Unicode
// simple folding: "ü" and "Ü", "%2f" and "%2F"), by Mark. An ASCII old (a
// token nearly always is) is looked for in an ASCII-lowered copy of s,
// at strings.Index's speed: a server's error text may be megabytes.
func replaceFold(s, old string) string {
	find := indexFold
	var ls, lo string
	if isASCII(old) {
		ls, lo = asciiLower(s), asciiLower(old)
		find = func(string, string) (int, int) {
			if i := strings.Index(ls, lo); i >= 0 {
				ls = ls[i+len(lo):]
				return i, len(lo)
			}
			return -1, 0
		}
	}
	var b strings.Builder
	for {
		i, n := find(s, old)
		if i < 0 {
			break
		}
		b.WriteString(s[:i])
		b.WriteString(Mark)
		s = s[i+n:]
	}
	if b.Len() == 0 {
		return s
	}
	b.WriteString(s)
	return b.String()
}

// indexFold is the byte offset and length in s of the first match of sub
// in any case, or -1. A match may differ from sub in length (a folded
// character may be written in fewer or more bytes).
func indexFold(s, sub string) (int, int) {
	first, _ := utf8.DecodeRuneInString(sub)
	for i := 0; i < len(s); {
		c, w := utf8.DecodeRuneInString(s[i:])
		if foldEq(c, first) {
			if n := prefixFold(s[i:], sub); n > 0 {
				return i, n
			}
		}
		i += w
	}
	return -1, 0
}

// prefixFold is how many bytes of s match sub in any case (0: none).
func prefixFold(s, sub string) int {
	i := 0
	for _, r := range sub {
		if i >= len(s) {
			return 0
		}
		c, w := utf8.DecodeRuneInString(s[i:])
		if !foldEq(c, r) {
			return 0
		}
		i += w
	}
	return i
}

func foldEq(a, b rune) bool {
	if a == b {
		return true
	}
	for f := unicode.SimpleFold(a); f != a; f = unicode.SimpleFold(f) {
		if f == b {
			return true
		}
	}
	return false
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// asciiLower is s with A-Z lowered, byte for byte (invalid UTF-8 kept as
// it is, so that offsets in it are offsets in s).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}
