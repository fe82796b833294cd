package redact

import (
	"regexp"
	"strings"
)

// tokenLike matches what looks like a credential in free text: a Hugging
// Face token (hf_...), an OpenAI-style key (sk-...), and the value after
// "Bearer ".
// A key a server quotes masked (OpenAI: "sk-proj-****...abcd") still shows
// its first and last characters: it is redacted whole too.
var tokenLike = regexp.MustCompile(`\b(?:hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{16,}|(?:sk|hf)[-_][A-Za-z0-9_-]*\*{3,}[A-Za-z0-9_*-]*)|(?i:bearer)\s+[A-Za-z0-9._~+/=-]{8,}`)

// urlLike matches a URL in free text, up to the first space or quote.
var urlLike = regexp.MustCompile(`(?i)\bhttps?://[^\s"'<>]+`)

// Text returns s with every secret given (the token in use, say), anything
// that looks like a token, and the credentials of any URL in it replaced by
// REDACTED. It is for text that comes from outside (a server's error
// message) before it is shown or written.
func Text(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) >= 4 {
			s = strings.ReplaceAll(s, sec, Mark)
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
