package calibration

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/provider"
)

func samples(label string, rows ...any) []Sample {
	var s []Sample
	for i := 0; i < len(rows); i += 2 {
		s = append(s, Sample{Label: label, Score: rows[i].(float64), Correct: rows[i+1].(bool)})
	}
	return s
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("%s = %.15g, want %.15g", what, got, want)
	}
}

// By hand: scores 0.2 wrong, 0.4 right, 0.6 wrong, 0.8 right. Pooling:
// [0], [1, 0] → 0.5 (2 rows), [1]. The overall rate p = (2+1)/(4+2) = 0.5;
// shrunk with m = 10: (0+5)/11, (1+5)/12, (1+5)/11. Centres 0.2, 0.5, 0.8.
func TestFitByHand(t *testing.T) {
	f, err := Fit(samples("a", 0.2, false, 0.4, true, 0.6, false, 0.8, true), For{})
	if err != nil {
		t.Fatal(err)
	}
	c := f.Pooled
	if len(c.Points) != 3 || c.Rows != 4 || c.Correct != 2 {
		t.Fatalf("curve = %+v", c)
	}
	want := []Point{{0.2, 5.0 / 11}, {0.5, 0.5}, {0.8, 6.0 / 11}}
	for i, p := range c.Points {
		near(t, "x", p[0], want[i][0])
		near(t, "y", p[1], want[i][1])
	}
	near(t, "below the first centre", f.Calibrate("a", 0.1), 5.0/11)
	near(t, "above the last", f.Calibrate("a", 0.95), 6.0/11)
	near(t, "between", f.Calibrate("a", 0.35), 5.0/11+(0.5-5.0/11)*0.5)
	if len(f.Labels) != 0 {
		t.Errorf("a label of 4 rows got its own map: %v", f.Labels)
	}
	if !math.IsNaN(f.Calibrate("a", math.NaN())) {
		t.Error("a blank score got one")
	}
}

// Shrinking a small block toward a high prior can lift it above a large
// one after it; the map is made monotone again.
func TestShrinkKeepsOrder(t *testing.T) {
	var s []Sample
	s = append(s, samples("a", 0.3, true, 0.3, false)...)
	for i := range 1000 {
		s = append(s, Sample{Label: "a", Score: 0.7, Correct: i < 600})
		s = append(s, Sample{Label: "a", Score: 0.9, Correct: true})
	}
	f, err := Fit(s, For{})
	if err != nil {
		t.Fatal(err)
	}
	c := f.Labels["a"]
	if len(c.Points) != 2 {
		t.Fatalf("points %v: the shrunk 0.3 block should pool with 0.7's", c.Points)
	}
	for i := 1; i < len(c.Points); i++ {
		if c.Points[i][1] <= c.Points[i-1][1] {
			t.Errorf("not increasing: %v", c.Points)
		}
	}
}

// A few rows never give 0 or 1, however they fall.
func TestNeverCertainFromFewRows(t *testing.T) {
	for _, right := range []bool{true, false} {
		var s []Sample
		for i := range 5 {
			s = append(s, Sample{Label: "a", Score: 0.5 + float64(i)/10, Correct: right})
		}
		f, err := Fit(s, For{})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range []float64{0, 0.5, 0.9, 1} {
			if v := f.Calibrate("a", x); v <= 0.05 || v >= 0.95 {
				t.Errorf("all right=%v: %v → %v from 5 rows", right, x, v)
			}
		}
	}
}

// Calibrated scores keep the ranking of the raw ones: on random data with
// labels of their own maps and a pooled one, sorted raw scores give
// non-decreasing calibrated ones, for every label.
func TestKeepsRanking(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s []Sample
	for range 3000 {
		x := rng.Float64()
		l := []string{"pos", "neg", "neu"}[rng.IntN(3)]
		s = append(s, Sample{Label: l, Score: math.Round(x*1e4) / 1e4, Correct: rng.Float64() < 0.3+0.6*x})
	}
	s = append(s, samples("rare", 0.1, true, 0.9, false)...)
	f, err := Fit(s, For{})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Labels) != 3 || f.Counts["rare"] != 2 {
		t.Fatalf("labels %d, counts %v", len(f.Labels), f.Counts)
	}
	for _, l := range []string{"pos", "NEG", "neu", "rare", "never seen"} {
		prev := -1.0
		for i := 0; i <= 1000; i++ {
			v := f.Calibrate(l, float64(i)/1000)
			if v < prev || v <= 0 || v >= 1 {
				t.Fatalf("%s: %v → %v after %v", l, float64(i)/1000, v, prev)
			}
			prev = v
		}
	}
}

func TestTooFew(t *testing.T) {
	if _, err := Fit(samples("a", 0.5, true), For{}); err != ErrTooFew {
		t.Errorf("err = %v", err)
	}
	if _, err := Fit(samples("a", math.NaN(), true, math.NaN(), false, 2.0, true), For{}); err != ErrTooFew {
		t.Errorf("blank and out-of-range scores used: %v", err)
	}
}

func TestFileRoundTrip(t *testing.T) {
	f, err := Fit(samples("a", 0.2, false, 0.4, true, 0.6, false, 0.8, true), For{Provider: "local", Model: "m", Labels: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := f.Write(&b); err != nil {
		t.Fatal(err)
	}
	g, err := Read(&b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	if g.Calibrate("a", 0.35) != f.Calibrate("a", 0.35) || g.For.Diff(f.For) != "" {
		t.Errorf("read back differs: %+v", g)
	}
}

func TestReadRefuses(t *testing.T) {
	good := `{"format":"hfsent-calibration/1","fitted_for":{"provider":"local","model":"m","labels":[],"label_map":"","request_sha256":"x"},"method":"isotonic-shrunk","prior_rows":10,"min_label_rows":100,"rows":4,"label_rows":{},"labels":{},"pooled":{"rows":4,"correct":2,"points":[[0.2,0.4],[0.8,0.6]]}}`
	if _, err := Read(strings.NewReader(good)); err != nil {
		t.Fatalf("good file refused: %v", err)
	}
	for what, bad := range map[string]string{
		"another format": strings.Replace(good, "hfsent-calibration/1", "hfsent-calibration/9", 1),
		"another method": strings.Replace(good, "isotonic-shrunk", "platt", 1),
		"decreasing":     strings.Replace(good, "[[0.2,0.4],[0.8,0.6]]", "[[0.2,0.6],[0.8,0.4]]", 1),
		"x not above":    strings.Replace(good, "[[0.2,0.4],[0.8,0.6]]", "[[0.8,0.4],[0.8,0.6]]", 1),
		"out of range":   strings.Replace(good, "[[0.2,0.4],[0.8,0.6]]", "[[0.2,0.4],[0.8,1.6]]", 1),
		"no points":      strings.Replace(good, "[[0.2,0.4],[0.8,0.6]]", "[]", 1),
		"unknown field":  strings.Replace(good, `"rows":4,`, `"rows":4,"extra":1,`, 1),
		"label unfolded": strings.Replace(good, `"labels":{}`, `"labels":{"POS":{"rows":1,"correct":1,"points":[[0.5,0.5]]}}`, 1),
		"two values":     good + good,
		"not json":       "hello",
		"a point of one": strings.Replace(good, "[[0.2,0.4],[0.8,0.6]]", "[[0.2],[0.8,0.6]]", 1),
		"empty":          "",
	} {
		if _, err := Read(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
}

// A calibration fitted for another model, label set, map or prompt says
// what differs.
func TestDiff(t *testing.T) {
	base := For{Provider: "chat", Model: "m", Labels: []string{"a", "b"}, Request: "h1"}
	for _, c := range []struct {
		run  For
		want string
	}{
		{base, ""},
		{For{Provider: "chat", Model: "other", Labels: []string{"a", "b"}, Request: "h2"}, `model "m", this run "other"`},
		{For{Provider: "chat", Model: "m", Labels: []string{"b", "a"}, Request: "h2"}, `labels "a,b", this run "b,a"`},
		{For{Provider: "chat", Model: "m", Labels: []string{"a", "b"}, Request: "h2"}, "the prompt or a parameter"},
		{For{Provider: "chat", Model: "m", Labels: []string{"a", "b"}, LabelMap: "a=x", Request: "h1"}, "--label-map"},
	} {
		got := base.Diff(c.run)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("Diff(%+v) = %q, want it to say %q", c.run, got, c.want)
		}
	}
}

// The request hash follows the prompt and the labels, and not the text.
func TestRequestHash(t *testing.T) {
	kind, _ := provider.KindOf("chat")
	hash := func(prompt string, labels ...string) string {
		c, _, err := kind.New(provider.Spec{Model: "m", Labels: labels, Prompt: prompt})
		if err != nil {
			t.Fatal(err)
		}
		return RequestHash("chat", c)
	}
	a := hash("", "pos", "neg")
	if a != hash("", "pos", "neg") {
		t.Error("the same run hashes differently")
	}
	if a == hash("", "neg", "pos") || a == hash("Label this: {text} as {labels}", "pos", "neg") {
		t.Error("another prompt or label order hashes the same")
	}
	local, _ := provider.KindOf("local")
	lc, _, _ := local.New(provider.Spec{})
	if RequestHash("local", lc) == "" {
		t.Error("no hash for the local model")
	}
}

func FuzzRead(f *testing.F) {
	f.Add(`{"format":"hfsent-calibration/1","fitted_for":{"provider":"local","model":"m","labels":[],"label_map":"","request_sha256":"x"},"method":"isotonic-shrunk","prior_rows":10,"min_label_rows":100,"rows":4,"label_rows":{},"labels":{},"pooled":{"rows":4,"correct":2,"points":[[0.2,0.4],[0.8,0.6]]}}`)
	f.Add(`{"format":"hfsent-calibration/1","labels":{"a":{"points":[[0,0],[1,1]]}},"pooled":{"points":[[0.5,0.5]]},"method":"isotonic-shrunk"}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Read(strings.NewReader(s))
		if err != nil {
			return
		}
		// A file that is read gives a probability in [0, 1], in order.
		prev := -1.0
		for i := 0; i <= 20; i++ {
			v := c.Calibrate("a", float64(i)/20)
			if !(v >= 0 && v <= 1) || v < prev {
				t.Fatalf("%v → %v after %v", float64(i)/20, v, prev)
			}
			prev = v
		}
	})
}
