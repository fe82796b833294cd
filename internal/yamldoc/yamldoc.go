// Package yamldoc reads the YAML files hfsent takes (label files, --config
// and --cascade files) as one document of nodes, so that every error names
// the file, its line and, where it is one key's, the key.
//
// go.yaml.in/yaml/v3 is the YAML organisation's maintained successor of
// gopkg.in/yaml.v3 (archived), pure Go. Its Node API keeps the line of
// every key and value, and the file's comments and order, which a tool
// that writes a file back (hfsent tune -o) keeps; decoding into structs or
// maps, as koanf and viper do, loses both.
package yamldoc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Error is a problem in a file, at a line (0: the file's as a whole), and
// with a key when it is one key's.
type Error struct {
	File string
	Line int
	Key  string // "" when the problem is not one key's
	Msg  string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// Doc is a file being read: its name (for errors) and last line.
type Doc struct {
	Name string
	// What is the file as messages name it ("the label file").
	What string
	// Last is the file's last line.
	Last int
}

// Parse reads data, a file of at most maxBytes holding one YAML document,
// and returns its root node (nil for an empty document). Bytes that are
// not UTF-8, characters YAML does not allow, a syntax error and a second
// document are refused, naming the line. what names the file in messages
// ("the label file").
func Parse(name, what string, data []byte, maxBytes int) (*yaml.Node, Doc, error) {
	d := Doc{Name: name, What: what, Last: LineAt(data, len(data), true)}
	if err := d.checkBytes(data, maxBytes); err != nil {
		return nil, d, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, d, nil
		}
		return nil, d, d.yamlError(data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, d, &Error{File: name, Line: max(1, next.Line), Msg: "a second YAML document: " + what + " holds one"}
	case !errors.Is(err, io.EOF):
		return nil, d, d.yamlError(data, err)
	}
	if len(doc.Content) == 0 {
		return nil, d, nil
	}
	return doc.Content[0], d, nil
}

// yamlLine is the line a YAML error names: "yaml: line 7: ...".
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlAnchor is an error about an anchor, which names no line.
var yamlAnchor = regexp.MustCompile(`^yaml: (unknown anchor|anchor) '(.*)' (referenced|value contains itself)$`)

// yamlError names the line of a syntax error. The parser has no error
// type: the line is in its message, counted from 0 for the parser's
// problems (go-yaml issue 205) and from 1 for the scanner's, and missing
// for a problem on the first line and for an anchor's; those are found
// here. One it does not name at all is put at the last line, where the
// parser stopped.
func (d Doc) yamlError(data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := d.Last // where the parser stopped
	if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
		if n, e := strconv.Atoi(m[1]); e == nil && n > 0 {
			line, msg = n, m[2]
			if parserProblem(msg) {
				line++
			}
		}
	} else if parserProblem(msg) {
		line = 1
	} else if m := yamlAnchor.FindStringSubmatch(err.Error()); m != nil {
		mark := "*"
		if m[1] == "anchor" {
			mark = "&"
		}
		if i := bytes.Index(data, []byte(mark+m[2])); i >= 0 {
			line = LineAt(data, i, true)
		}
	}
	// A problem at the end of the stream is counted on a line past the
	// last one when the file does not end in a line break.
	return &Error{File: d.Name, Line: min(line, d.Last), Msg: "not valid YAML: " + msg}
}

// parserProblem reports whether msg is one of the YAML parser's problems,
// whose line the message counts from 0 (the scanner's it counts from 1).
func parserProblem(msg string) bool {
	switch msg {
	case "did not find expected <stream-start>", "did not find expected <document start>",
		"did not find expected ',' or ']'", "did not find expected ',' or '}'",
		"did not find expected '-' indicator", "did not find expected key",
		"did not find expected node content", "found duplicate %YAML directive",
		"found incompatible YAML document", "found undefined tag handle",
		"found duplicate %TAG directive":
		return true
	}
	return false
}

// checkBytes refuses, naming the line, what the YAML parser would refuse
// without one: a file over maxBytes, bytes that are not UTF-8, and
// characters YAML does not allow (control characters but tab and line
// breaks).
func (d Doc) checkBytes(data []byte, maxBytes int) error {
	if len(data) > maxBytes {
		return &Error{File: d.Name, Msg: fmt.Sprintf("%s is over %d bytes", d.What, maxBytes)}
	}
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return &Error{File: d.Name, Line: LineAt(data, i, true), Msg: d.What + " is not UTF-8: save it as UTF-8"}
		case !printable(r) && !(i == 0 && r == '\uFEFF'):
			return &Error{File: d.Name, Line: LineAt(data, i, true), Msg: fmt.Sprintf("%s holds %U, a character YAML does not allow", d.What, r)}
		}
		i += n
	}
	return nil
}

// printable is YAML 1.2's c-printable, which the parser checks.
func printable(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D || (r >= 0x20 && r <= 0x7E) || r == 0x85 ||
		(r >= 0xA0 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
}

// LineAt is the line, from 1, of data[off]. YAML ends a line at a CR not
// followed by an LF too (cr); CSV does not.
func LineAt(data []byte, off int, cr bool) int {
	line := 1
	for i := 0; i < off && i < len(data); i++ {
		if data[i] == '\n' || (cr && data[i] == '\r' && (i+1 >= len(data) || data[i+1] != '\n')) {
			line++
		}
	}
	return line
}

// Err is an error at n's line. An empty document's node is on the line
// after the last when the file does not end in a line break: the last.
func (d Doc) Err(n *yaml.Node, key, format string, a ...any) error {
	line := 1
	if n != nil {
		line = n.Line
	}
	return &Error{File: d.Name, Line: min(max(1, line), max(1, d.Last)), Key: key, Msg: fmt.Sprintf(format, a...)}
}

// Mapping checks that n is a mapping of known keys (known nil: any key),
// each once, and returns its values by key, and each key's line.
func (d Doc) Mapping(n *yaml.Node, what string, known ...string) (map[string]*yaml.Node, map[string]int, error) {
	if err := d.Plain(n, what); err != nil {
		return nil, nil, err
	}
	want := strings.Join(known, ", ")
	if want == "" {
		want = "keys"
	}
	if n.Kind != yaml.MappingNode {
		return nil, nil, d.Err(n, "", "%s is %s: want a mapping of %s", what, KindName(n), want)
	}
	out := map[string]*yaml.Node{}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := d.Plain(k, what+"'s key"); err != nil {
			return nil, nil, err
		}
		if k.Kind != yaml.ScalarNode {
			oneOf := want
			if len(known) > 0 {
				oneOf = "one of " + want
			}
			return nil, nil, d.Err(k, "", "%s has a key that is %s: want %s", what, KindName(k), oneOf)
		}
		if len(known) > 0 && !contains(known, k.Value) {
			return nil, nil, d.Err(k, k.Value, "unknown key %q in %s: want %s", Clip(k.Value), what, want)
		}
		if at, ok := lines[k.Value]; ok {
			return nil, nil, d.Err(k, k.Value, "key %q given twice in %s (first at line %d)", Clip(k.Value), what, at)
		}
		if err := d.Plain(v, k.Value); err != nil {
			return nil, nil, err
		}
		out[k.Value], lines[k.Value] = v, k.Line
	}
	return out, lines, nil
}

// Keys are n's keys in the file's order (n a mapping Mapping checked).
func Keys(n *yaml.Node) []string {
	var out []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		out = append(out, n.Content[i].Value)
	}
	return out
}

// Plain refuses anchors and aliases: none of hfsent's files needs them,
// and an alias of an alias could make a small file expand into a huge
// one.
func (d Doc) Plain(n *yaml.Node, what string) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return d.Err(n, "", "%s uses a YAML anchor or alias: write it out", what)
	}
	return nil
}

// Sequence checks that n is a sequence (an empty value is an empty one).
func (d Doc) Sequence(n *yaml.Node, key string) ([]*yaml.Node, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, d.Err(n, key, "%s is %s: want a list", key, KindName(n))
	}
	for _, c := range n.Content {
		if err := d.Plain(c, key); err != nil {
			return nil, err
		}
	}
	return n.Content, nil
}

// KindName says what n is, for a message.
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("the text %q", Clip(n.Value))
	}
	return "an alias"
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// Clip shortens a value quoted in an error.
func Clip(s string) string {
	if utf8.RuneCountInString(s) <= 40 {
		return s
	}
	return string([]rune(s)[:40]) + "..."
}
