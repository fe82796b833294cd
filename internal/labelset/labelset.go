// Package labelset holds a label set as a value: the task, each label's
// name, description and examples, and the examples that fit no label. It
// reads one from a label file (YAML or CSV, ParseYAML and ParseCSV), adds
// few-shot examples chosen from a labelled CSV (ReadExamples), and renders
// what a provider is sent for it: the fixed part of a chat prompt, which
// comes before the row's text so that a provider's prompt cache can reuse
// it (System), and a zero-shot model's hypotheses (ZeroShot). Digest sums
// everything in it, for the response cache's key and a calibration's hash.
//
// Labels follow the rule --labels follows, by calling the very function
// that checks --labels (provider.CheckLabels): a name refused there is
// refused here, and two names that are one label there are one here.
// Every error about a file names the file and the line.
//
// It knows nothing of flags or terminals. It imports internal/provider for
// that rule and its token estimate, so the provider must never import it:
// a command renders the set and hands the provider strings.
package labelset

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/yamldoc"
)

// Bounds of a label set, so that memory and the prompt stay bounded
// whatever a file holds.
const (
	// MaxFileBytes bounds a label file: a label file is written by hand
	// (a 1,500-token one is about 6 KB), and this is far past any model's
	// context once rendered.
	MaxFileBytes = 512 << 10
	// MaxExampleChars bounds an example's text, in characters.
	MaxExampleChars = 2000
	// MaxSystemBytes bounds the rendered fixed part, half of what a chat
	// prompt may hold (provider.MaxPromptBytes), leaving the rest to the
	// row's text. A label file alone never reaches it (rendering at most
	// doubles a file's bytes); examples chosen from a CSV may.
	MaxSystemBytes = provider.MaxPromptBytes / 2
)

// Set is a label set. Its zero value is not a valid set: build one with
// ParseYAML, ParseCSV, Load or FromNames.
type Set struct {
	// File is the file it was read from, for messages; not part of the set
	// (Digest leaves it out).
	File string
	// Task says what the classification is for; may be "".
	Task string
	// Labels in the file's order, 2 to provider.MaxLabels of them,
	// distinct as --labels are.
	Labels []Label
	// None are examples that fit none of the labels, in the file's order.
	None []Example
}

// Label is one label: the name answered with, what it means, and examples
// of it (the file's, then any ReadExamples chose).
type Label struct {
	Name        string
	Description string
	Examples    []Example
	Line        int // where the label is defined
}

// Example is a text and, optionally, why it is labelled so.
type Example struct {
	Text   string
	Reason string
	// Line is where it was read, in File or in the examples file it came
	// from; not part of the set.
	Line int
}

// Error is a problem with a file: it names the file and, when it is about
// a place in it, the line, and the key (or column) at fault.
type Error = yamldoc.Error

// Load reads a label file: CSV when its name ends in .csv, YAML otherwise.
// A file over MaxFileBytes is refused before it is parsed.
func Load(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &Error{File: path, Msg: "cannot read the label file: " + unwrapPath(err)}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, &Error{File: path, Msg: "cannot read the label file: " + unwrapPath(err)}
	}
	return Parse(path, data)
}

// Parse reads a label file's bytes, CSV when name ends in .csv, YAML
// otherwise.
func Parse(name string, data []byte) (*Set, error) {
	if strings.EqualFold(filepath.Ext(name), ".csv") {
		return ParseCSV(name, data)
	}
	return ParseYAML(name, data)
}

func unwrapPath(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// FromNames is the set --labels gives: names alone, checked as --labels
// are.
func FromNames(names []string) (*Set, error) {
	if err := provider.CheckLabels(names); err != nil {
		return nil, err
	}
	s := &Set{Labels: make([]Label, len(names))}
	for i, n := range names {
		s.Labels[i] = Label{Name: n}
	}
	return s, nil
}

// Names are the labels' names, in the set's order.
func (s *Set) Names() []string {
	n := make([]string, len(s.Labels))
	for i, l := range s.Labels {
		n[i] = l.Name
	}
	return n
}

// Index is the label name is, compared as --labels are (case, spaces and
// the quotes around it aside), or -1.
func (s *Set) Index(name string) int {
	for i, l := range s.Labels {
		if l.Name == name {
			return i
		}
	}
	if checkName(name) != nil {
		return -1
	}
	for i, l := range s.Labels {
		if provider.CheckLabels([]string{l.Name, name}) != nil {
			return i // both are labels alone: together, they are one
		}
	}
	return -1
}

// Described reports whether any label has a description.
func (s *Set) Described() bool {
	for _, l := range s.Labels {
		if l.Description != "" {
			return true
		}
	}
	return false
}

// clone copies the set deeply enough that appending examples to it leaves
// s as it was.
func (s *Set) clone() *Set {
	c := *s
	c.Labels = make([]Label, len(s.Labels))
	for i, l := range s.Labels {
		l.Examples = append([]Example(nil), l.Examples...)
		c.Labels[i] = l
	}
	c.None = append([]Example(nil), s.None...)
	return &c
}

// Digest is a stable sum of everything in the set that can change an
// answer: the task, every label's name, description and examples (texts
// and reasons), and the examples that fit none, in order. The file's name,
// its format, its comments and the lines things are on are left out: the
// same set read from YAML or CSV has the same digest. The response cache's
// key and a calibration's hash take it.
func (s *Set) Digest() string {
	h := sha256.New()
	field := func(v string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(v)))
		h.Write(n[:])
		io.WriteString(h, v)
	}
	field("hfsent label set 1")
	field(s.Task)
	examples := func(tag string, ex []Example) {
		field(fmt.Sprint(tag, len(ex)))
		for _, e := range ex {
			field(e.Text)
			field(e.Reason)
		}
	}
	field(fmt.Sprint("labels ", len(s.Labels)))
	for _, l := range s.Labels {
		field(l.Name)
		field(l.Description)
		examples("examples ", l.Examples)
	}
	examples("none ", s.None)
	return hex.EncodeToString(h.Sum(nil))
}

// checkName applies --labels' rule to one name. provider.CheckLabels
// judges a list of 2 or more, so the name is judged beside a second one:
// "a", or "b" when the name is the label "a" ("A", say), since a name is
// never both.
func checkName(name string) error {
	if provider.CheckLabels([]string{name, "a"}) == nil {
		return nil
	}
	return provider.CheckLabels([]string{name, "b"})
}

// checkLabels checks the labels' count and names as --labels are checked,
// naming the line of the label at fault; at is the line of the labels'
// key (where a missing label would go).
func (s *Set) checkLabels(at int) error {
	n := len(s.Labels)
	switch {
	case n < provider.MinLabels:
		return &Error{File: s.File, Line: at, Key: "labels", Msg: fmt.Sprintf("the label set has %d label(s): want %d to %d", n, provider.MinLabels, provider.MaxLabels)}
	case n > provider.MaxLabels:
		return &Error{File: s.File, Line: s.Labels[provider.MaxLabels].Line, Key: "labels", Msg: fmt.Sprintf("label %d of %d: a label set has at most %d labels", provider.MaxLabels+1, n, provider.MaxLabels)}
	}
	for _, l := range s.Labels {
		if err := checkName(l.Name); err != nil {
			return &Error{File: s.File, Line: l.Line, Key: "name", Msg: err.Error()}
		}
	}
	if provider.CheckLabels(s.Names()) == nil {
		return nil
	}
	// Each name passed alone: two are one label. Name the later one.
	for i, l := range s.Labels {
		for _, prev := range s.Labels[:i] {
			if err := provider.CheckLabels([]string{prev.Name, l.Name}); err != nil {
				return &Error{File: s.File, Line: l.Line, Key: "name", Msg: fmt.Sprintf("%s (the first at line %d): labels are compared as --labels are, case, spaces and quotes aside", err, prev.Line)}
			}
		}
	}
	return &Error{File: s.File, Line: at, Key: "labels", Msg: provider.CheckLabels(s.Names()).Error()}
}

// checkSize refuses a set whose fixed part would be over MaxSystemBytes.
func (s *Set) checkSize() error {
	if n := len(s.System(SingleInstruction)); n > MaxSystemBytes {
		return &Error{File: s.File, Msg: fmt.Sprintf("the prompt's fixed part would be %d bytes, over %d: fewer or shorter examples", n, MaxSystemBytes)}
	}
	return nil
}

// checkText refuses a description, task, reason or example that is not
// UTF-8 or holds a control character other than a tab or a line break:
// invisible in the file, they would be sent to the model unseen.
func checkText(file string, line int, key, v string) error {
	if !utf8.ValidString(v) {
		return &Error{File: file, Line: line, Key: key, Msg: key + " is not UTF-8"}
	}
	for i, r := range []rune(v) {
		if (r < 0x20 && r != '\t' && r != '\n') || (r >= 0x7f && r < 0xa0) {
			return &Error{File: file, Line: line, Key: key, Msg: fmt.Sprintf("%s holds the control character %U at character %d", key, r, i+1)}
		}
	}
	return nil
}

// checkExample refuses a blank example or one over MaxExampleChars.
func checkExample(file string, line int, key string, e Example) error {
	if strings.TrimSpace(e.Text) == "" {
		return &Error{File: file, Line: line, Key: key, Msg: "an example's text is blank"}
	}
	if n := utf8.RuneCountInString(e.Text); n > MaxExampleChars {
		return &Error{File: file, Line: line, Key: key, Msg: fmt.Sprintf("an example's text is %d characters, over %d", n, MaxExampleChars)}
	}
	if err := checkText(file, line, key, e.Text); err != nil {
		return err
	}
	return checkText(file, line, "reason", e.Reason)
}
