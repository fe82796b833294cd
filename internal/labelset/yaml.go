package labelset

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/hfsent/hfsent/internal/provider"
	// yamldoc reads the file (go.yaml.in/yaml/v3's Node API: every error
	// names its line), as it reads the config and cascade files.
	"github.com/hfsent/hfsent/internal/yamldoc"
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
	root, doc, err := yamldoc.Parse(name, "the label file", data, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return nil, &Error{File: name, Line: 1, Msg: "the label file is empty: it needs labels"}
	}
	y := yamlFile{doc}
	s, err := y.set(root)
	if err != nil {
		return nil, err
	}
	return s, s.checkSize()
}

// yamlFile is a label file being read (yamldoc reads every YAML file
// hfsent takes, each error at its line).
type yamlFile struct{ yamldoc.Doc }

// err is an error at n's line (yamldoc.Doc.Err).
func (y yamlFile) err(n *yaml.Node, key, format string, a ...any) error {
	return y.Err(n, key, format, a...)
}

// mapping checks that n is a mapping of known keys, each once, and returns
// its values by key.
func (y yamlFile) mapping(n *yaml.Node, what string, known ...string) (map[string]*yaml.Node, error) {
	m, _, err := y.Mapping(n, what, known...)
	return m, err
}

// text is a scalar's text as written (a number or true is its text); a
// null (an empty value, ~) is "".
func (y yamlFile) text(n *yaml.Node, key string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", y.err(n, key, "%s is %s: want text", key, yamldoc.KindName(n))
	}
	if n.Tag == "!!null" {
		return "", nil
	}
	return n.Value, checkText(y.Name, n.Line, key, n.Value)
}

// lineAt is the line, from 1, of data[off] (yamldoc.LineAt).
func lineAt(data []byte, off int, cr bool) int { return yamldoc.LineAt(data, off, cr) }

// clip shortens a value quoted in an error.
func clip(s string) string { return yamldoc.Clip(s) }

func (y yamlFile) set(root *yaml.Node) (*Set, error) {
	top, keyLines, err := y.Mapping(root, "the label file", "task", "labels", "examples")
	if err != nil {
		return nil, err
	}
	s := &Set{File: y.Name}
	if n := top["task"]; n != nil {
		if s.Task, err = y.text(n, "task"); err != nil {
			return nil, err
		}
	}
	labels := top["labels"]
	if labels == nil {
		return nil, y.err(root, "labels", "the label file has no labels: want labels, a list of 2 to %d", provider.MaxLabels)
	}
	items, err := y.Sequence(labels, "labels")
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
		items, err := y.Sequence(v, "examples")
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
		return e, nil, checkExample(y.Name, n.Line, "example", e)
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
	return e, m["label"], checkExample(y.Name, v.Line, "text", e)
}

// examples reads the examples outside the labels: one with label: joins
// that label's examples, one without fits none of them.
func (y yamlFile) examples(s *Set, n *yaml.Node) error {
	items, err := y.Sequence(n, "examples")
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
