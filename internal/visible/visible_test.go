package visible

import "testing"

func TestHidden(t *testing.T) {
	for s, want := range map[string]int{
		"":                 -1,
		"plain name":       -1,
		"café, ünïcode 日本": -1,
		"a\nb":             1,
		"\x1b[31mred":      0,
		"ab\u200bc":        2, // zero-width space
		"a\u200db":         1, // zero-width joiner
		"x\u202eevil":      1, // right-to-left override
		"é\u2066":          1, // left-to-right isolate, after a two-byte character
		"a\u2028b":         1, // line separator
		"a\u2029b":         1, // paragraph separator
		"soft\u00adhyphen": 4,
		"bom\ufeff":        3,
		"tab\there":        3,
	} {
		if _, got := Hidden(s); got != want {
			t.Errorf("Hidden(%q) at %d, want %d", s, got, want)
		}
	}
	if r, _ := Hidden("x\u202ey"); r != '\u202e' {
		t.Errorf("Hidden names %U, want U+202E", r)
	}
}
