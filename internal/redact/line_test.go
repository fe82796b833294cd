package redact

import "testing"

func TestLine(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"  model\tnot\n\nfound  ", 200, "model not found"},
		{"bad \xff byte", 200, "bad \uFFFD byte"},
		{"key hf_secret123 refused", 200, "key REDACTED refused"},
		{"abcdefghij", 5, "abcde…"},
		{"a\u200bb", 200, "a b"},
	} {
		if got := Line(c.in, c.max, "hf_secret123"); got != c.want {
			t.Errorf("Line(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
	}
}
