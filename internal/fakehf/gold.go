package fakehf

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// Gold answers as a model that is right with probability P: for a text of
// its gold file, the gold label when a hash of the text says so, else
// another of the file's labels; deterministic per text, so a second run
// (or a cached one) sees the same answers. Its confidence carries
// information as a real model's does: the top probability is drawn higher,
// on average, when the answer is right, so a calibration fitted on it
// ranks right answers above wrong ones (it is no oracle: the two ranges
// overlap). A text not in the file is answered Label(text).
type Gold struct {
	// P is the share of texts answered their gold label (0..1).
	P      float64
	labels map[string]string // text -> gold label
	set    []string          // the distinct gold labels, sorted
}

// MaxGoldRows bounds a gold file.
const MaxGoldRows = 2_000_000

// ReadGold reads a CSV with a header holding textCol and goldCol; rows
// with a blank gold label are left out.
func ReadGold(r io.Reader, textCol, goldCol string, p float64) (*Gold, error) {
	if !(p >= 0 && p <= 1) {
		return nil, fmt.Errorf("gold: probability %v is not in 0..1", p)
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("gold: header: %v", err)
	}
	ti, gi := -1, -1
	for i, h := range head {
		switch strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")) {
		case textCol:
			ti = i
		case goldCol:
			gi = i
		}
	}
	if ti < 0 || gi < 0 {
		return nil, fmt.Errorf("gold: the header has no %q or no %q column", textCol, goldCol)
	}
	g := &Gold{P: p, labels: map[string]string{}}
	seen := map[string]bool{}
	for n := 0; ; n++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("gold: %v", err)
		}
		if n >= MaxGoldRows {
			return nil, fmt.Errorf("gold: more than %d rows", MaxGoldRows)
		}
		if ti >= len(rec) || gi >= len(rec) || strings.TrimSpace(rec[gi]) == "" {
			continue
		}
		l := strings.TrimSpace(rec[gi])
		g.labels[rec[ti]] = l
		if !seen[l] {
			seen[l] = true
			g.set = append(g.set, l)
		}
	}
	sort.Strings(g.set)
	return g, nil
}

// Answer is the label answered for text and the probability the fake
// gives it (its first token's), and whether text is in the file.
func (g *Gold) Answer(text string) (label string, prob float64, ok bool) {
	gold, ok := g.labels[text]
	if !ok {
		return "", 0, false
	}
	u1, u2, u3 := unit(text, 1), unit(text, 2), unit(text, 3)
	right := u1 < g.P || len(g.set) < 2
	if right {
		// 0.55..0.99, bunched high.
		return gold, 0.55 + 0.44*math.Sqrt(u2), true
	}
	others := make([]string, 0, len(g.set)-1)
	for _, l := range g.set {
		if l != gold {
			others = append(others, l)
		}
	}
	// 0.5..0.95, bunched low.
	return others[int(u3*float64(len(others)))%len(others)], 0.5 + 0.45*u2*u2, true
}

// unit is a number in [0, 1) drawn from a hash of text and salt.
func unit(text string, salt byte) float64 {
	// sha256, not FNV: FNV's high bits barely move between short texts
	// that differ in a digit.
	sum := sha256.Sum256(append([]byte{salt}, text...))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / float64(uint64(1)<<53)
}
