// Package report draws a picture of one hfsent run from its results: a
// timeline with one bar per row (waiting for a slot, then at the provider),
// coloured by outcome, a line of calls in flight over time, and a table of
// counts and latency percentiles. The output is a self-contained SVG (or an
// HTML page holding it) with bounded size, whatever the number of rows.
//
// The SVG is built by hand rather than with gonum/plot: the picture is a
// Gantt-style timeline with per-bar colours, tooltips and a table, which
// gonum/plot has no plotter for; hand-built output is a few hundred lines,
// has no font or image dependencies, and is byte-for-byte deterministic,
// which keeps the golden-file test honest.
package report

import (
	"math/rand/v2"
	"slices"
	"sort"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/quality"
)

// Record is one results row, as far as the picture needs it. Times are
// milliseconds since the run began.
type Record struct {
	RequestID  string
	Outcome    string
	Sent       bool  // false for rows never sent (no started_ms)
	QueuedMs   int64 // when the row was read
	StartedMs  int64 // when its first call was sent; meaningless unless Sent
	FinishedMs int64
	LatencyMs  int64 // meaningless unless Sent
	// Label and Score are as written (the formula guard undone; Score NaN
	// when blank), for the quality against gold labels; the picture does
	// not read them.
	Label string
	Score float64
}

// Options tunes a Collector. Zero values take the defaults noted.
type Options struct {
	// MaxBars bounds the bars drawn; beyond it rows are sampled, each
	// outcome keeping a fair share so that rare failures stay visible.
	// Default 2000.
	MaxBars int
	// Title names the run (e.g. the results file).
	Title string
}

const (
	defaultMaxBars = 2000
	// seriesBuckets is how many time slices the in-flight line has.
	seriesBuckets = 400
	// maxLatencies bounds the latencies kept for percentiles; beyond it a
	// uniform sample of this size estimates them.
	maxLatencies = 1 << 20
)

// bar is a row kept for drawing.
type bar struct {
	Record
	seq int64
}

// reservoir keeps a uniform sample of at most capacity bars (Algorithm R).
type reservoir struct {
	bars []bar
	seen int64
}

func (r *reservoir) add(b bar, capacity int, rng *rand.Rand) {
	r.seen++
	if len(r.bars) < capacity {
		r.bars = append(r.bars, b)
		return
	}
	if j := rng.Int64N(r.seen); j < int64(capacity) {
		r.bars[j] = b
	}
}

// Collector takes result records one at a time, in any number, and keeps a
// bounded summary of them: exact counts, a sample of bars, the in-flight
// series and (a sample of) latencies. It is not safe for concurrent use.
type Collector struct {
	opts    Options
	rng     *rand.Rand
	rows    int64
	counts  map[string]int64
	keep    map[string]*reservoir
	lat     []int64
	latSeen int64
	end     int64
	flight  series
	waiting series
}

// NewCollector returns an empty collector.
func NewCollector(opts Options) *Collector {
	if opts.MaxBars <= 0 {
		opts.MaxBars = defaultMaxBars
	}
	return &Collector{
		opts: opts,
		// A fixed seed: the same results draw the same picture.
		rng:     rand.New(rand.NewPCG(1, 2)),
		counts:  map[string]int64{},
		keep:    map[string]*reservoir{},
		flight:  newSeries(seriesBuckets),
		waiting: newSeries(seriesBuckets),
	}
}

// Add records one row.
func (c *Collector) Add(r Record) {
	c.rows++
	if r.Outcome == "" {
		r.Outcome = "unknown"
	}
	// Clamp nonsense rather than draw it (ReadCSV refuses it; this guards
	// other callers): past MaxMs the time axis could not be built.
	r.QueuedMs = min(max(r.QueuedMs, 0), MaxMs)
	r.FinishedMs = min(max(r.FinishedMs, r.QueuedMs), MaxMs)
	if r.Sent {
		r.StartedMs = min(max(r.StartedMs, r.QueuedMs), r.FinishedMs)
		r.LatencyMs = min(max(r.LatencyMs, 0), MaxMs)
	}
	c.counts[r.Outcome]++
	c.end = max(c.end, r.FinishedMs)
	res := c.keep[r.Outcome]
	if res == nil {
		res = &reservoir{}
		c.keep[r.Outcome] = res
	}
	res.add(bar{Record: r, seq: c.rows}, c.opts.MaxBars, c.rng)
	if r.Sent {
		c.flight.add(r.StartedMs, r.FinishedMs)
		c.waiting.add(r.QueuedMs, r.StartedMs)
		c.latSeen++
		if len(c.lat) < maxLatencies {
			c.lat = append(c.lat, r.LatencyMs)
		} else if j := c.rng.Int64N(c.latSeen); j < maxLatencies {
			c.lat[j] = r.LatencyMs
		}
	} else {
		c.waiting.add(r.QueuedMs, r.FinishedMs)
	}
}

// Count is the number of rows with one outcome.
type Count struct {
	Outcome string
	Rows    int64
	Share   float64 // of all rows
}

// Report is what gets drawn.
type Report struct {
	Title              string
	Rows               int64
	EndMs              int64 // the last row's finish
	Counts             []Count
	Bars               []bar // in input order
	Sampled            bool  // Bars is a sample of the rows
	Sent               int64 // rows sent to the provider
	P50, P95, P99, Max int64
	// LatencySampled says the percentiles are estimated from a sample.
	LatencySampled bool
	// Flight and Waiting are averages per time slice of width SliceMs.
	Flight, Waiting []float64
	SliceMs         int64
	// Quality, when set, is the run's quality against its gold labels:
	// the HTML page shows it.
	Quality *quality.Report
}

// Report summarises what was collected.
func (c *Collector) Report() *Report {
	rep := &Report{Title: c.opts.Title, Rows: c.rows, EndMs: c.end, Sent: c.latSeen}
	for _, o := range orderedOutcomes(c.counts) {
		share := 0.0
		if c.rows > 0 {
			share = float64(c.counts[o]) / float64(c.rows)
		}
		rep.Counts = append(rep.Counts, Count{Outcome: o, Rows: c.counts[o], Share: share})
	}
	rep.Bars, rep.Sampled = c.pickBars()
	if len(c.lat) > 0 {
		lat := slices.Clone(c.lat)
		slices.Sort(lat)
		rep.P50, rep.P95, rep.P99 = percentile(lat, 50), percentile(lat, 95), percentile(lat, 99)
		rep.Max = lat[len(lat)-1]
		rep.LatencySampled = c.latSeen > int64(len(c.lat))
	}
	width := max(c.flight.width, c.waiting.width)
	rep.SliceMs = width
	rep.Flight = c.flight.alignedAverages(width, c.end)
	rep.Waiting = c.waiting.alignedAverages(width, c.end)
	return rep
}

// pickBars shares MaxBars among the outcomes: an outcome with fewer rows
// than its share keeps them all, the rest is split evenly among the others
// (water-filling), so a handful of timeouts in a million successes is drawn.
func (c *Collector) pickBars() ([]bar, bool) {
	outs := orderedOutcomes(c.counts)
	budget := c.opts.MaxBars
	if c.rows <= int64(budget) {
		var all []bar
		for _, o := range outs {
			all = append(all, c.keep[o].bars...)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
		return all, false
	}
	// Smallest first, so leftovers flow to the larger outcomes.
	bySize := slices.Clone(outs)
	sort.SliceStable(bySize, func(i, j int) bool { return c.counts[bySize[i]] < c.counts[bySize[j]] })
	// Its own fixed seed, so that asking twice gives the same picture.
	rng := rand.New(rand.NewPCG(3, 4))
	var all []bar
	left := budget
	for i, o := range bySize {
		share := left / (len(bySize) - i)
		kept := c.keep[o].bars
		n := min(len(kept), share)
		// A reservoir is a uniform sample; a uniform subsample of it is too.
		// Sort first so that the subsample depends only on the data.
		kept = slices.Clone(kept)
		sort.Slice(kept, func(a, b int) bool { return kept[a].seq < kept[b].seq })
		rng.Shuffle(len(kept), func(a, b int) { kept[a], kept[b] = kept[b], kept[a] })
		all = append(all, kept[:n]...)
		left -= n
	}
	sort.Slice(all, func(i, j int) bool { return all[i].seq < all[j].seq })
	return all, true
}

// orderedOutcomes lists the outcomes seen: known codes in the documented
// order, then anything else alphabetically.
func orderedOutcomes(counts map[string]int64) []string {
	var out []string
	known := map[string]bool{}
	for _, c := range outcome.All() {
		known[string(c)] = true
		if counts[string(c)] > 0 {
			out = append(out, string(c))
		}
	}
	var other []string
	for o := range counts {
		if !known[o] {
			other = append(other, o)
		}
	}
	sort.Strings(other)
	return append(out, other...)
}

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 × n)
	return sorted[max(rank, 1)-1]
}

// series accumulates, for fixed-width time slices, the total time that
// intervals overlap each slice; divided by the width it is the average number
// of intervals open during the slice. When an interval ends past the last
// slice the width doubles and neighbours merge, so memory stays fixed
// however long the run.
type series struct {
	width int64 // ms per slice
	sum   []int64
}

func newSeries(n int) series { return series{width: 1, sum: make([]int64, n)} }

func (s *series) add(from, to int64) {
	if to <= from || from < 0 {
		return
	}
	for to > s.width*int64(len(s.sum)) {
		s.grow()
	}
	for i := from / s.width; i*s.width < to; i++ {
		lo, hi := max(from, i*s.width), min(to, (i+1)*s.width)
		s.sum[i] += hi - lo
	}
}

func (s *series) grow() {
	n := len(s.sum)
	for i := 0; i < n/2; i++ {
		s.sum[i] = s.sum[2*i] + s.sum[2*i+1]
	}
	clear(s.sum[n/2:])
	s.width *= 2
}

// averages returns the average count per slice up to end.
func (s *series) averages(end int64) []float64 {
	if end <= 0 {
		return nil
	}
	n := int((end + s.width - 1) / s.width)
	n = min(n, len(s.sum))
	out := make([]float64, n)
	for i := range out {
		w := min(s.width, end-int64(i)*s.width)
		out[i] = float64(s.sum[i]) / float64(w)
	}
	return out
}

// alignedAverages is averages at the width of another series (which may
// have grown further), so that two lines share one time axis.
func (s *series) alignedAverages(width, end int64) []float64 {
	for s.width < width {
		s.grow()
	}
	return s.averages(end)
}
