package stage

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/hfsent/hfsent/internal/yamldoc"
)

// MaxFileBytes bounds a --config or --cascade file: a few hundred lines
// are plenty.
const MaxFileBytes = 1 << 20

// ReadFile reads a --config or --cascade file (at most MaxFileBytes and a
// byte: Parse refuses more).
func ReadFile(flag, path string) ([]byte, error) {
	b, err := ReadBounded(path, MaxFileBytes)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %v", flag, path, unwrapPathError(err))
	}
	return b, nil
}

// Origins says where a file set each flag: "FILE:LINE", by the flag's
// long name.
type Origins map[string]string

// flagName finds the settings a message names: --name, or escalate-below.
var flagName = regexp.MustCompile(`--([a-z][a-z0-9-]*)|\b(escalate-below)\b`)

// Wrap puts the place a file set a setting before a message that names
// it (the first such setting the message names): "cfg.yaml:3: --concurrency
// must be ...". err is returned as it is when it names none of them.
func (o Origins) Wrap(err error) error {
	if err == nil || len(o) == 0 {
		return err
	}
	for _, m := range flagName.FindAllStringSubmatch(err.Error(), -1) {
		name := m[1] + m[2]
		if at, ok := o[name]; ok {
			return &placed{at: at, err: err}
		}
	}
	return err
}

// placed is an error with the place in a file that caused it.
type placed struct {
	at  string
	err error
}

func (p *placed) Error() string { return p.at + ": " + p.err.Error() }
func (p *placed) Unwrap() error { return p.err }

// ApplyConfig sets, on fs, each key of the --config file name (its bytes:
// data) that the command line did not set (fs.Changed), through the flag
// of that long name, so that the file's value is parsed and bounded as
// the flag's is. It returns where each key was set. An unknown key (no
// flag of the command by that long name), a value the flag refuses, or a
// list or mapping where a value goes is an error naming FILE:LINE and the
// key.
func ApplyConfig(name string, data []byte, fs *pflag.FlagSet) (Origins, error) {
	root, doc, err := yamldoc.Parse(name, "the config file", data, MaxFileBytes)
	if err != nil || root == nil {
		return nil, err
	}
	values, lines, err := doc.Mapping(root, "the config file")
	if err != nil {
		return nil, err
	}
	origins := Origins{}
	for _, key := range yamldoc.Keys(root) {
		set, err := configKey(doc, fs, key, lines[key], values[key])
		if err != nil {
			return nil, err
		}
		if set {
			origins[key] = fmt.Sprintf("%s:%d", name, lines[key])
		}
	}
	return origins, nil
}

// configKey sets fs's flag key to the file's value v, unless the command
// line set it; set says whether it did.
func configKey(doc yamldoc.Doc, fs *pflag.FlagSet, key string, line int, v *yaml.Node) (set bool, err error) {
	at := &yaml.Node{Line: line}
	switch {
	case key == "config":
		return false, doc.Err(at, key, "config: a config file cannot name another")
	case key == "help" || fs.Lookup(key) == nil:
		hint := ""
		// pflag's ShorthandLookup panics on more than one ASCII character.
		if len(key) == 1 && key[0] < 0x80 {
			if s := fs.ShorthandLookup(key); s != nil {
				hint = " (a key is a flag's long name: " + s.Name + ")"
			}
		}
		return false, doc.Err(at, key, "unknown key %q: it is no flag's long name%s", yamldoc.Clip(key), hint)
	case fs.Changed(key):
		return false, nil // the command line wins
	}
	s, err := value(doc, key, v)
	if err != nil {
		return false, err
	}
	if err := fs.Set(key, s); err != nil {
		return false, doc.Err(v, key, "%s: invalid value %q: %v", key, yamldoc.Clip(s), err)
	}
	return true, nil
}

// value is a key's value as a flag would be given it: a scalar as
// written; a list of scalars joined by commas (labels: [a, b]); for
// label-map, a mapping of FROM: TO too.
func value(doc yamldoc.Doc, key string, v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", nil
		}
		return v.Value, nil
	case yaml.SequenceNode:
		items, err := doc.Sequence(v, key)
		if err != nil {
			return "", err
		}
		var out []string
		for _, it := range items {
			if it.Kind != yaml.ScalarNode {
				return "", doc.Err(it, key, "%s: an item is %s: want a value", key, yamldoc.KindName(it))
			}
			out = append(out, it.Value)
		}
		return strings.Join(out, ","), nil
	case yaml.MappingNode:
		if key != "label-map" {
			break
		}
		m, _, err := doc.Mapping(v, key)
		if err != nil {
			return "", err
		}
		var out []string
		for _, from := range yamldoc.Keys(v) {
			to := m[from]
			if to.Kind != yaml.ScalarNode {
				return "", doc.Err(to, key, "%s: %s maps to %s: want a label", key, yamldoc.Clip(from), yamldoc.KindName(to))
			}
			out = append(out, from+"="+to.Value)
		}
		return strings.Join(out, ","), nil
	}
	return "", doc.Err(v, key, "%s is %s: want a value", key, yamldoc.KindName(v))
}

// File is a --cascade file read: its stages, in order, and the document
// as parsed (Root: its comments and key order kept, for a tool that
// writes the file back, as yaml.Encoder encodes a node).
type File struct {
	Name   string
	Stages []FileStage
	Root   *yaml.Node
}

// FileStage is one stage of a --cascade file: its settings, the line it
// starts at and each key's, and what tune recorded of it.
type FileStage struct {
	Config *Config
	// Node is the stage's mapping in File.Root (its keys and values, to
	// set escalate-below or tuned in place).
	Node  *yaml.Node
	Line  int
	Lines map[string]int
	// Tuned is what hfsent tune measured of the stage on gold rows; nil
	// when the file records nothing.
	Tuned *Tuned
}

// Tuned is a stage's tuned: what tune measured of it on gold rows.
type Tuned struct {
	// Escalates is the share of the rows reaching the stage that it sent
	// on (0 for the last stage).
	Escalates float64
	// Accuracy, when measured, is the stage's accuracy on the rows it
	// answered (-1: not recorded).
	Accuracy float64
}

// stageOnly are the settings a stage of a cascade cannot have, and why.
var stageOnly = map[string]string{
	"fallback-model":    "a cascade's next stage is its fallback: add the model as a stage",
	"fallback-endpoint": "a cascade's next stage is its fallback: add the model as a stage, with its endpoint",
}

// LoadCascade reads a --cascade file (its bytes: data): a mapping with
// stages, a list of 1 to MaxStages stages, each a mapping of the provider
// settings by their flags' long names, escalate-below, and tuned. Each
// stage's keys are set through a FlagSet newFlags makes for a fresh
// Config (so a value is parsed as the flag's is); the Config's Given
// reports the keys the stage set. An unknown key, a value refused, a
// threshold out of [0, 1] or on the last stage: an error naming
// FILE:LINE, the stage and the key. Validate the stages (Validate) and
// place their errors (File.Wrap) after.
func LoadCascade(name string, data []byte, newFlags func(*Config) *pflag.FlagSet) (*File, error) {
	root, doc, err := yamldoc.Parse(name, "the cascade file", data, MaxFileBytes)
	if err != nil {
		return nil, err
	}
	if root == nil {
		return nil, &yamldoc.Error{File: name, Line: 1, Msg: "the cascade file is empty: it needs stages"}
	}
	top, _, err := doc.Mapping(root, "the cascade file", "stages")
	if err != nil {
		return nil, err
	}
	if top["stages"] == nil {
		return nil, doc.Err(root, "stages", "the cascade file has no stages: want stages, a list of 1 to %d", MaxStages)
	}
	items, err := doc.Sequence(top["stages"], "stages")
	switch {
	case err != nil:
		return nil, err
	case len(items) == 0:
		return nil, doc.Err(top["stages"], "stages", "stages is empty: want 1 to %d stages", MaxStages)
	case len(items) > MaxStages:
		return nil, doc.Err(items[MaxStages], "stages", "stage %d of %d: a cascade has at most %d stages", MaxStages+1, len(items), MaxStages)
	}
	f := &File{Name: name, Root: root}
	for i, it := range items {
		s, err := readStage(doc, it, i, len(items), newFlags)
		if err != nil {
			return nil, err
		}
		f.Stages = append(f.Stages, s)
	}
	return f, nil
}

// MaxStages bounds a cascade.
const MaxStages = 8

// readStage reads stage i (from 0) of n.
func readStage(doc yamldoc.Doc, n *yaml.Node, i, count int, newFlags func(*Config) *pflag.FlagSet) (FileStage, error) {
	what := fmt.Sprintf("stage %d", i+1)
	values, lines, err := doc.Mapping(n, what)
	if err != nil {
		return FileStage{}, err
	}
	c := &Config{}
	fs := newFlags(c)
	c.Given = fs.Changed
	s := FileStage{Config: c, Node: n, Line: n.Line, Lines: lines}
	for _, key := range yamldoc.Keys(n) {
		v, at := values[key], &yaml.Node{Line: lines[key]}
		if why, ok := stageOnly[key]; ok {
			return s, doc.Err(at, key, "%s: %s is not a stage's key: %s", what, key, why)
		}
		if key == "admission-wait" && i > 0 {
			return s, doc.Err(at, key, "%s: admission-wait is stage 1's: a row is admitted once, and a later stage's call waits for its slot within its row's deadline", what)
		}
		if key == "tuned" {
			if s.Tuned, err = readTuned(doc, v, at, what); err != nil {
				return s, err
			}
			continue
		}
		if err := stageKey(doc, fs, what, key, at, v); err != nil {
			return s, err
		}
	}
	if c.MultiLabel {
		return s, doc.Err(&yaml.Node{Line: lines["multi-label"]}, "multi-label", "%s: multi-label in a cascade: the cascade stays single-label (a row goes on by one label's calibrated score); run the model alone with --multi-label", what)
	}
	if c.EscalateBelow > 0 && i == count-1 {
		return s, doc.Err(&yaml.Node{Line: lines["escalate-below"]}, "escalate-below", "%s: escalate-below on the last stage: there is no stage to send a row on to (the last stage's answer is final)", what)
	}
	return s, nil
}

// stageKey sets a stage's key through its flag.
func stageKey(doc yamldoc.Doc, fs *pflag.FlagSet, what, key string, at, v *yaml.Node) error {
	if fs.Lookup(key) == nil || key == "help" {
		return doc.Err(at, key, "%s: unknown key %q: want a provider setting by its flag's long name (model, endpoint, labels, calibration, concurrency, ...), escalate-below or tuned", what, yamldoc.Clip(key))
	}
	s, err := value(doc, key, v)
	if err != nil {
		return err
	}
	if err := fs.Set(key, s); err != nil {
		return doc.Err(v, key, "%s: %s: invalid value %q: %v", what, key, yamldoc.Clip(s), err)
	}
	return nil
}

// readTuned reads a stage's tuned: escalates (required) and accuracy,
// each between 0 and 1.
func readTuned(doc yamldoc.Doc, n, at *yaml.Node, what string) (*Tuned, error) {
	m, _, err := doc.Mapping(n, what+"'s tuned", "escalates", "accuracy")
	if err != nil {
		return nil, err
	}
	t := &Tuned{Accuracy: -1}
	share := func(key string, dst *float64) error {
		v := m[key]
		if v == nil {
			return nil
		}
		f, err := strconv.ParseFloat(v.Value, 64)
		if v.Kind != yaml.ScalarNode || err != nil || !(f >= 0 && f <= 1) {
			return doc.Err(v, key, "%s: tuned %s is %s: want a share between 0 and 1", what, key, yamldoc.KindName(v))
		}
		*dst = f
		return nil
	}
	if m["escalates"] == nil {
		return nil, doc.Err(at, "escalates", "%s: tuned has no escalates: the share of the rows reaching the stage that it sends on", what)
	}
	if err := share("escalates", &t.Escalates); err != nil {
		return nil, err
	}
	return t, share("accuracy", &t.Accuracy)
}

// Configs are the stages' settings, in order.
func (f *File) Configs() []*Config {
	out := make([]*Config, len(f.Stages))
	for i, s := range f.Stages {
		out[i] = s.Config
	}
	return out
}

// Wrap places an error about stage i (from 0) in the file: at the line of
// the first key the message names that the stage set, else at the
// stage's own line.
func (f *File) Wrap(i int, err error) error {
	if err == nil {
		return nil
	}
	s := f.Stages[i]
	line := s.Line
	for _, m := range flagName.FindAllStringSubmatch(err.Error(), -1) {
		if l, ok := s.Lines[m[1]+m[2]]; ok {
			line = l
			break
		}
	}
	return &placed{at: fmt.Sprintf("%s:%d: stage %d", f.Name, line, i+1), err: err}
}

// Reach is the share of rows each stage is expected to be asked for, from
// the stages' tuned escalation (1 for the first); ok is false when a stage
// that sends rows on records none.
func (f *File) Reach() (reach []float64, ok bool) {
	share := 1.0
	for i, s := range f.Stages {
		reach = append(reach, share)
		if i == len(f.Stages)-1 {
			break
		}
		if s.Tuned == nil {
			return nil, false
		}
		share *= s.Tuned.Escalates
	}
	return reach, true
}

// IsFileError reports whether err is a file's error (its place named).
func IsFileError(err error) bool {
	var ye *yamldoc.Error
	var p *placed
	return errors.As(err, &ye) || errors.As(err, &p)
}
