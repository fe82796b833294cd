package labelset

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hfsent/hfsent/internal/provider"

	// go.yaml.in/yaml/v3 is the YAML organisation's maintained successor of
	// gopkg.in/yaml.v3 (archived), pure Go, and already in the module graph
	// (cobra's reference generator uses it). Its Node API keeps the line of
	// every key and value, so that every error names its line; the config
	// and cascade files read the same way with it.
	"go.yaml.in/yaml/v3"
)

// ParseYAML reads a label file in YAML:
//
//	task: Classify customer feedback on home repair visits.
//	labels:
//	  - name: positive
//	    description: The customer is glad of the service.
//	    examples:
//	      - "Came on time and fixed the boiler in an hour."
//	      - text: "Fine, I suppose."
//	        reason: mild, but glad
//	  - negative                 # a name alone
//	examples:                    # optional
//	  - text: "Which day can the engineer come?"   # fits no label
//	  - text: "Never again."
//	    label: negative          # one of the labels: added to its examples
//
// An unknown key, a key given twice, a label without a name, an example
// naming no label, anchors and aliases, a second document, or a value of
// the wrong kind is refused, naming the line. name is shown in errors.
func ParseYAML(name string, data []byte) (*Set, error) {
	if err := checkYAMLBytes(name, data); err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Line: 1, Msg: "the label file is empty: it needs labels"}
		}
		return nil, yamlError(name, data, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, &Error{File: name, Line: max(1, next.Line), Msg: "a second YAML document: a label file holds one"}
	case !errors.Is(err, io.EOF):
		return nil, yamlError(name, data, err)
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: name, Line: 1, Msg: "the label file is empty: it needs labels"}
	}
	y := yamlFile{name: name, last: lineAt(data, len(data), true)}
	s, err := y.set(doc.Content[0])
	if err != nil {
		return nil, err
	}
	return s, s.checkSize()
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
func yamlError(name string, data []byte, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := lineAt(data, len(data), true) // where the parser stopped
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
			line = lineAt(data, i, true)
		}
	}
	// A problem at the end of the stream is counted on a line past the
	// last one when the file does not end in a line break.
	line = min(line, lineAt(data, len(data), true))
	return &Error{File: name, Line: line, Msg: "not valid YAML: " + msg}
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

// checkYAMLBytes refuses, naming the line, what the YAML parser would
// refuse without one: a file over MaxFileBytes, bytes that are not UTF-8,
// and characters YAML does not allow (control characters but tab and line
// breaks).
func checkYAMLBytes(name string, data []byte) error {
	if len(data) > MaxFileBytes {
		return &Error{File: name, Msg: fmt.Sprintf("the label file is over %d bytes", MaxFileBytes)}
	}
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			return &Error{File: name, Line: lineAt(data, i, true), Msg: "the label file is not UTF-8: save it as UTF-8"}
		case !yamlPrintable(r) && !(i == 0 && r == '\uFEFF'):
			return &Error{File: name, Line: lineAt(data, i, true), Msg: fmt.Sprintf("the label file holds %U, a character YAML does not allow", r)}
		}
		i += n
	}
	return nil
}

// yamlPrintable is YAML 1.2's c-printable, which the parser checks.
func yamlPrintable(r rune) bool {
	return r == 0x09 || r == 0x0A || r == 0x0D || (r >= 0x20 && r <= 0x7E) || r == 0x85 ||
		(r >= 0xA0 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
}

// lineAt is the line, from 1, of data[off]. YAML ends a line at a CR not
// followed by an LF too (cr); CSV does not.
func lineAt(data []byte, off int, cr bool) int {
	line := 1
	for i := 0; i < off && i < len(data); i++ {
		if data[i] == '\n' || (cr && data[i] == '\r' && (i+1 >= len(data) || data[i+1] != '\n')) {
			line++
		}
	}
	return line
}

type yamlFile struct {
	name string
	last int // the file's last line
}

// err is an error at n's line. An empty document's node is on the line
// after the last when the file does not end in a line break: the last.
func (y yamlFile) err(n *yaml.Node, key, format string, a ...any) error {
	return &Error{File: y.name, Line: min(max(1, n.Line), y.last), Key: key, Msg: fmt.Sprintf(format, a...)}
}

// mapping checks that n is a mapping of known keys, each once, and returns
// its values by key. A value's Line is its own; the key's is in keyLines
// (of the label file only).
func (y yamlFile) mapping(n *yaml.Node, what string, known ...string) (map[string]*yaml.Node, error) {
	m, _, err := y.mappingLines(n, what, known...)
	return m, err
}

func (y yamlFile) mappingLines(n *yaml.Node, what string, known ...string) (map[string]*yaml.Node, map[string]int, error) {
	if err := y.plain(n, what); err != nil {
		return nil, nil, err
	}
	if n.Kind != yaml.MappingNode {
		return nil, nil, y.err(n, "", "%s is %s: want a mapping of %s", what, kindName(n), strings.Join(known, ", "))
	}
	out := map[string]*yaml.Node{}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if err := y.plain(k, what+"'s key"); err != nil {
			return nil, nil, err
		}
		if k.Kind != yaml.ScalarNode {
			return nil, nil, y.err(k, "", "%s has a key that is %s: want one of %s", what, kindName(k), strings.Join(known, ", "))
		}
		if !contains(known, k.Value) {
			return nil, nil, y.err(k, k.Value, "unknown key %q in %s: want %s", clip(k.Value), what, strings.Join(known, ", "))
		}
		if at, ok := lines[k.Value]; ok {
			return nil, nil, y.err(k, k.Value, "key %q given twice in %s (first at line %d)", k.Value, what, at)
		}
		if err := y.plain(v, k.Value); err != nil {
			return nil, nil, err
		}
		out[k.Value], lines[k.Value] = v, k.Line
	}
	return out, lines, nil
}

// plain refuses anchors and aliases: a label file needs none, and an alias
// of an alias could make a small file expand into a huge set.
func (y yamlFile) plain(n *yaml.Node, what string) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return y.err(n, "", "%s uses a YAML anchor or alias: write it out", what)
	}
	return nil
}

// text is a scalar's text as written (a number or true is its text); a
// null (an empty value, ~) is "".
func (y yamlFile) text(n *yaml.Node, key string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", y.err(n, key, "%s is %s: want text", key, kindName(n))
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	return n.Value, checkText(y.name, n.Line, key, n.Value)
}

// sequence checks that n is a sequence (an empty value is an empty one).
func (y yamlFile) sequence(n *yaml.Node, key string) ([]*yaml.Node, error) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, y.err(n, key, "%s is %s: want a list", key, kindName(n))
	}
	for _, c := range n.Content {
		if err := y.plain(c, key); err != nil {
			return nil, err
		}
	}
	return n.Content, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return fmt.Sprintf("the text %q", clip(n.Value))
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

// clip shortens a value quoted in an error.
func clip(s string) string {
	if utf8.RuneCountInString(s) <= 40 {
		return s
	}
	return string([]rune(s)[:40]) + "..."
}

func (y yamlFile) set(root *yaml.Node) (*Set, error) {
	top, keyLines, err := y.mappingLines(root, "the label file", "task", "labels", "examples")
	if err != nil {
		return nil, err
	}
	s := &Set{File: y.name}
	if n := top["task"]; n != nil {
		if s.Task, err = y.text(n, "task"); err != nil {
			return nil, err
		}
	}
	labels := top["labels"]
	if labels == nil {
		return nil, y.err(root, "labels", "the label file has no labels: want labels, a list of 2 to %d", provider.MaxLabels)
	}
	items, err := y.sequence(labels, "labels")
	if err != nil {
		return nil, err
	}
	if len(items) > provider.MaxLabels {
		return nil, y.err(items[provider.MaxLabels], "labels", "label %d of %d: a label set has at most %d labels", provider.MaxLabels+1, len(items), provider.MaxLabels)
	}
	for _, it := range items {
		l, err := y.label(it)
		if err != nil {
			return nil, err
		}
		s.Labels = append(s.Labels, l)
	}
	if err := s.checkLabels(keyLines["labels"]); err != nil {
		return nil, err
	}
	if n := top["examples"]; n != nil {
		if err := y.examples(s, n); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// label reads one label: a mapping of name, description and examples, or
// a name alone.
func (y yamlFile) label(n *yaml.Node) (Label, error) {
	if n.Kind == yaml.ScalarNode {
		name, err := y.text(n, "name")
		if err != nil {
			return Label{}, err
		}
		return y.named(Label{Name: strings.TrimSpace(name), Line: n.Line}, n)
	}
	m, err := y.mapping(n, "a label", "name", "description", "examples")
	if err != nil {
		return Label{}, err
	}
	l := Label{Line: n.Line}
	if v := m["name"]; v != nil {
		if l.Name, err = y.text(v, "name"); err != nil {
			return Label{}, err
		}
		l.Name, l.Line = strings.TrimSpace(l.Name), v.Line
	}
	if l, err = y.named(l, n); err != nil {
		return Label{}, err
	}
	if v := m["description"]; v != nil {
		if l.Description, err = y.text(v, "description"); err != nil {
			return Label{}, err
		}
		l.Description = strings.TrimSpace(l.Description)
	}
	if v := m["examples"]; v != nil {
		items, err := y.sequence(v, "examples")
		if err != nil {
			return Label{}, err
		}
		for _, it := range items {
			e, _, err := y.example(it, false)
			if err != nil {
				return Label{}, err
			}
			l.Examples = append(l.Examples, e)
		}
	}
	return l, nil
}

// named refuses a label without a name (spaces around a name are trimmed,
// as --labels trims them).
func (y yamlFile) named(l Label, n *yaml.Node) (Label, error) {
	if l.Name == "" {
		return l, y.err(n, "name", "a label without a name: give it name:")
	}
	return l, nil
}

// example reads an example: its text alone, or a mapping of text and
// reason (and, outside a label, label: the label it is an example of).
func (y yamlFile) example(n *yaml.Node, outside bool) (e Example, label *yaml.Node, err error) {
	e.Line = n.Line
	if n.Kind == yaml.ScalarNode {
		if e.Text, err = y.text(n, "example"); err != nil {
			return e, nil, err
		}
		return e, nil, checkExample(y.name, n.Line, "example", e)
	}
	known := []string{"text", "reason"}
	if outside {
		known = append(known, "label")
	}
	m, err := y.mapping(n, "an example", known...)
	if err != nil {
		return e, nil, err
	}
	v := m["text"]
	if v == nil {
		return e, nil, y.err(n, "text", "an example without text: give it text:")
	}
	if e.Text, err = y.text(v, "text"); err != nil {
		return e, nil, err
	}
	if r := m["reason"]; r != nil {
		if e.Reason, err = y.text(r, "reason"); err != nil {
			return e, nil, err
		}
		e.Reason = strings.TrimSpace(e.Reason)
	}
	e.Line = v.Line
	return e, m["label"], checkExample(y.name, v.Line, "text", e)
}

// examples reads the examples outside the labels: one with label: joins
// that label's examples, one without fits none of them.
func (y yamlFile) examples(s *Set, n *yaml.Node) error {
	items, err := y.sequence(n, "examples")
	if err != nil {
		return err
	}
	for _, it := range items {
		e, label, err := y.example(it, true)
		if err != nil {
			return err
		}
		name := ""
		if label != nil {
			if name, err = y.text(label, "label"); err != nil {
				return err
			}
		}
		if strings.TrimSpace(name) == "" {
			s.None = append(s.None, e)
			continue
		}
		i := s.Index(strings.TrimSpace(name))
		if i < 0 {
			return y.err(label, "label", "the example names label %q, which is none of the labels (%s)", clip(name), listNames(s))
		}
		s.Labels[i].Examples = append(s.Labels[i].Examples, e)
	}
	return nil
}
