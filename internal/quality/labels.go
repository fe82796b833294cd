// Package quality says how good a run's labels are against gold labels:
// accuracy, macro-F1, precision, recall and F1 per label, the confusion
// matrix, the expected calibration error with its reliability bins, and the
// coverage table (the share of rows kept above a score, and their
// accuracy). It also holds what a run does to each answer before it is
// written (Answers: --label-map, a calibration, the review flag).
//
// Every figure is computed from what the results file holds (the label as
// written, the score rounded to 4 places as written), so a reader who
// recomputes it by hand from the results and the gold labels gets exactly
// the same number. It knows nothing of flags, files or terminals: classify,
// the worker, queue export, report, calibrate, and the cascade and tune
// that come after all call it.
package quality

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
)

// Key is a label as labels are compared: the spaces around it trimmed and
// its case folded (Unicode full case folding), so "Positive", " positive "
// and "POSITIVE" are one label. Per-label figures are keyed by it.
func Key(label string) string {
	s := strings.TrimSpace(label)
	upper := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return cases.Fold().String(s)
		}
		upper = upper || c >= 'A' && c <= 'Z'
	}
	if upper {
		return asciiLower(s)
	}
	return s
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// Same reports whether two labels are the same label (Key).
func Same(a, b string) bool { return Key(a) == Key(b) }

// LabelMap maps the model's labels onto the gold ones (--label-map
// FROM=TO,...): LABEL_0=negative, POSITIVE=pos. FROM is matched as labels
// are compared (Key); a label no FROM matches is kept as it is.
type LabelMap struct {
	to    map[string]string // Key(FROM) → TO, as given
	pairs []string          // "FROM=TO", as given, in order
}

// MaxLabelMapPairs bounds --label-map.
const MaxLabelMapPairs = 1000

// ParseLabelMap reads FROM=TO pairs separated by commas; spaces around
// each name are ignored. A pair without '=', a blank name, a FROM given
// twice, a name with a control or formatting character, or more than
// MaxLabelMapPairs pairs is refused, naming the pair. "" is the empty map.
func ParseLabelMap(s string) (LabelMap, error) {
	m := LabelMap{}
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxLabelMapPairs {
		return m, fmt.Errorf("%d pairs, at most %d", len(parts), MaxLabelMapPairs)
	}
	m.to = make(map[string]string, len(parts))
	for i, p := range parts {
		from, to, ok := strings.Cut(p, "=")
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		switch {
		case !ok:
			return LabelMap{}, fmt.Errorf("pair %d %.60q has no '=': want FROM=TO,...", i+1, p)
		case from == "" || to == "":
			return LabelMap{}, fmt.Errorf("pair %d %.60q: FROM and TO must not be blank", i+1, p)
		case !printable(from) || !printable(to):
			return LabelMap{}, fmt.Errorf("pair %d %.60q holds a control or formatting character, or bytes that are not UTF-8", i+1, p)
		}
		k := Key(from)
		if _, dup := m.to[k]; dup {
			return LabelMap{}, fmt.Errorf("pair %d maps %q a second time", i+1, from)
		}
		m.to[k] = to
		m.pairs = append(m.pairs, from+"="+to)
	}
	return m, nil
}

// printable refuses what would not show as it is in a results file or a
// message: control and formatting characters, invalid UTF-8.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return false
		}
	}
	return true
}

// Apply maps label; a label no FROM matches is returned as it is.
func (m LabelMap) Apply(label string) string {
	if len(m.to) == 0 || label == "" {
		return label
	}
	if to, ok := m.to[Key(label)]; ok {
		return to
	}
	return label
}

// Empty reports whether the map maps nothing.
func (m LabelMap) Empty() bool { return len(m.to) == 0 }

// String is the map as it was given, spaces trimmed: "FROM=TO,...".
func (m LabelMap) String() string { return strings.Join(m.pairs, ",") }
