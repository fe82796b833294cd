package yamldoc

import (
	"errors"
	"strings"
	"testing"
)

// Every refusal names the file and the line: a syntax error (the parser
// counts some lines from 0, the scanner from 1), a second document, bytes
// that are not UTF-8, a character YAML refuses, a file over the bound, an
// unknown or doubled key, an alias.
func TestParseErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct {
		data string
		line int
		want string
	}{
		{"a: 1\nb: [1, 2\n", 2, "not valid YAML"},
		{"a: 1\n b: 2\nc\n", 2, "not valid YAML"},
		{"a: 1\n---\nb: 2\n", 2, "a second YAML document: the file holds one"},
		{"a: 1\nb: \xff\n", 2, "the file is not UTF-8"},
		{"a: 1\n\nb: \x07\n", 3, "a character YAML does not allow"},
		{strings.Repeat("a", 65), 0, "the file is over 64 bytes"},
	} {
		_, _, err := Parse("f.yaml", "the file", []byte(c.data), 64)
		var ye *Error
		if !errors.As(err, &ye) || ye.Line != c.line || ye.File != "f.yaml" || !strings.Contains(ye.Msg, c.want) {
			t.Errorf("%q: %v; want line %d and %q", c.data, err, c.line, c.want)
		}
	}
	for _, c := range []struct {
		data string
		line int
		want string
	}{
		{"a: 1\nc: 2\n", 2, `unknown key "c" in the file: want a, b`},
		{"a: 1\nb: 2\na: 3\n", 3, `key "a" given twice in the file (first at line 1)`},
		{"a: &x 1\nb: *x\n", 1, "anchor or alias"},
		{"- 1\n", 1, "the file is a list: want a mapping of a, b"},
	} {
		root, d, err := Parse("f.yaml", "the file", []byte(c.data), 1<<10)
		if err == nil {
			_, _, err = d.Mapping(root, "the file", "a", "b")
		}
		var ye *Error
		if !errors.As(err, &ye) || ye.Line != c.line || !strings.Contains(ye.Msg, c.want) {
			t.Errorf("%q: %v; want line %d and %q", c.data, err, c.line, c.want)
		}
	}
	if root, _, err := Parse("f.yaml", "the file", []byte("# only a comment\n"), 64); root != nil || err != nil {
		t.Errorf("an empty document: %v %v", root, err)
	}
}
