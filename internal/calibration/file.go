package calibration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/quality"
)

// Format names the file's layout; a file of another is refused.
const Format = "hfsent-calibration/1"

// File is a fitted calibration as calibrate writes it.
type File struct {
	Format string `json:"format"`
	// For is what the calibration was fitted for; a run for anything else
	// is refused.
	For          For    `json:"fitted_for"`
	Method       string `json:"method"`
	PriorRows    int    `json:"prior_rows"`
	MinLabelRows int    `json:"min_label_rows"`
	// Rows is the rows fitted on (success, a gold label, a score); Counts
	// how many of them each label had.
	Rows   int64            `json:"rows"`
	Counts map[string]int64 `json:"label_rows"`
	// Labels are the maps of the labels with enough rows, keyed as labels
	// are compared (quality.Key); Pooled is fitted on every row and serves
	// the others.
	Labels map[string]Curve `json:"labels"`
	Pooled Curve            `json:"pooled"`
}

// For is what a calibration was fitted for: the model, the labels it
// answered with, the label map that renamed them, and a hash of the
// request it was sent (the prompt and every parameter that changes the
// answer).
type For struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	// Labels are --labels, in order ([] for a model with labels of its own).
	Labels   []string `json:"labels"`
	LabelMap string   `json:"label_map"`
	// Request is the hash of the request the run would send for a fixed
	// text (RequestHash).
	Request string `json:"request_sha256"`
}

// probe is the text whose request stands for every request of a run: the
// requests of two runs for it are the same exactly when everything but the
// text is.
const probe = "hfsent calibration probe"

// RequestHash is the hash of what client c of kind would send for a fixed
// text, as the response cache keys a request (cache.KeyOf: the kind, the
// model, the body: the prompt, the labels, every parameter), but without
// the URL: the same model asked at another address (a server moved to
// another port, a dedicated endpoint) answers the same. A client that
// cannot show its request (the embedded model) is hashed by its kind and
// model.
func RequestHash(kind string, c provider.Classifier) string {
	var body []byte
	if r, ok := c.(provider.Requester); ok {
		if _, b, err := r.Request(probe); err == nil {
			body = b
		}
	}
	key := cache.KeyOf(kind, c.Model(), "", body)
	return fmt.Sprintf("%x", key[:])
}

// Diff names what differs between the run f was fitted for and run, ""
// when nothing does.
func (f For) Diff(run For) string {
	var d []string
	if f.Provider != run.Provider {
		d = append(d, fmt.Sprintf("provider %q, this run %q", f.Provider, run.Provider))
	}
	if f.Model != run.Model {
		d = append(d, fmt.Sprintf("model %q, this run %q", f.Model, run.Model))
	}
	if !slices.Equal(f.Labels, run.Labels) {
		d = append(d, fmt.Sprintf("labels %q, this run %q", strings.Join(f.Labels, ","), strings.Join(run.Labels, ",")))
	}
	if f.LabelMap != run.LabelMap {
		d = append(d, fmt.Sprintf("--label-map %q, this run %q", f.LabelMap, run.LabelMap))
	}
	if f.Request != run.Request && len(d) == 0 {
		// Named only alone: another model or labels change it too.
		d = append(d, "the prompt or a parameter that changes the answers (--prompt-file, --constrain, ...): request hash "+short(f.Request)+", this run "+short(run.Request))
	}
	return strings.Join(d, "; ")
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// MaxFileBytes bounds a calibration file; MaxPoints a curve, MaxCurves
// the labels.
const (
	MaxFileBytes = 16 << 20
	MaxPoints    = 100_000
	MaxCurves    = quality.MaxLabels
)

// Read reads and checks a calibration file: its format, and every curve
// (points in [0, 1] with increasing x and non-decreasing y), so that a
// damaged or hand-edited file is refused before a run rather than giving
// scores out of order.
func Read(r io.Reader) (*File, error) {
	b, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d MiB: not a calibration file", MaxFileBytes>>20)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("not JSON at byte %d: %v", se.Offset, err)
		}
		return nil, fmt.Errorf("not a calibration file: %v", err)
	}
	if dec.More() {
		return nil, errors.New("more than one JSON value")
	}
	if err := f.check(); err != nil {
		return nil, err
	}
	return &f, nil
}

func (f *File) check() error {
	if f.Format != Format {
		return fmt.Errorf("format %q, want %q (written by another hfsent, or not by calibrate)", f.Format, Format)
	}
	if f.Method != Method {
		return fmt.Errorf("method %q, want %q", f.Method, Method)
	}
	if len(f.Labels) > MaxCurves {
		return fmt.Errorf("%d label maps, at most %d", len(f.Labels), MaxCurves)
	}
	if err := f.Pooled.check(); err != nil {
		return fmt.Errorf("pooled map: %v", err)
	}
	for l, c := range f.Labels {
		if err := c.check(); err != nil {
			return fmt.Errorf("map of label %q: %v", l, err)
		}
		if quality.Key(l) != l {
			return fmt.Errorf("label %q is not written as labels are compared (%q)", l, quality.Key(l))
		}
	}
	return nil
}

func (c Curve) check() error {
	switch {
	case len(c.Points) == 0:
		return errors.New("no points")
	case len(c.Points) > MaxPoints:
		return fmt.Errorf("%d points, at most %d", len(c.Points), MaxPoints)
	}
	for i, p := range c.Points {
		if !in01(p[0]) || !in01(p[1]) {
			return fmt.Errorf("point %d (%v, %v) is outside [0, 1]", i+1, p[0], p[1])
		}
		if i > 0 && (p[0] <= c.Points[i-1][0] || p[1] < c.Points[i-1][1]) {
			return fmt.Errorf("point %d (%v, %v) does not follow point %d (%v, %v): the map must increase", i+1, p[0], p[1], i, c.Points[i-1][0], c.Points[i-1][1])
		}
	}
	return nil
}

func in01(v float64) bool { return !math.IsNaN(v) && v >= 0 && v <= 1 }

// Write writes f as indented JSON.
func (f *File) Write(w io.Writer) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Constant is a calibration for f that believes each label of probs with
// that probability, whatever the score (labels it does not name: 0.5). A
// fitted one (Fit) follows the score; this one is for a stage whose score
// says nothing of its labels (tests' cascades among them).
func Constant(f For, probs map[string]float64) *File {
	out := &File{Format: Format, For: f, Method: Method, PriorRows: PriorRows, MinLabelRows: MinLabelRows,
		Labels: map[string]Curve{}, Counts: map[string]int64{},
		Pooled: Curve{Points: []Point{{0, 0.5}, {1, 0.5}}}}
	for label, p := range probs {
		out.Labels[quality.Key(label)] = Curve{Points: []Point{{0, p}, {1, p}}}
	}
	return out
}
