package tune

import (
	"io"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/hfsent/hfsent/internal/stage"
)

// Write writes the cascade file f back to w with the tuned thresholds (th,
// one per stage but the last), each stage's tuned block (escalates: the
// share of rows reaching it that it sent on, accuracy: on the rows it
// answered), and cals[k], when set, as stage k's calibration. It edits
// f.Root in place, so the user's comments and key order stay.
func Write(w io.Writer, f *stage.File, th []float64, tuned []stage.Tuned, cals map[int]string) error {
	for k, s := range f.Stages {
		if path, ok := cals[k]; ok {
			setKey(s.Node, "calibration", scalar(path))
		}
		if k < len(th) {
			setKey(s.Node, "escalate-below", scalar(num(th[k])))
		}
		m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		setKey(m, "escalates", scalar(num(tuned[k].Escalates)))
		if tuned[k].Accuracy >= 0 {
			setKey(m, "accuracy", scalar(num(tuned[k].Accuracy)))
		}
		setKey(s.Node, "tuned", m)
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(f.Root); err != nil {
		return err
	}
	return enc.Close()
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

// setKey sets key in mapping m to v: in place when m has it (its comments
// kept), else at the end.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			old := m.Content[i+1]
			v.HeadComment, v.LineComment, v.FootComment = old.HeadComment, old.LineComment, old.FootComment
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key), v)
}
