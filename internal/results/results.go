// Package results holds the results CSV: its columns, a writer that makes
// every written row durable at once, and a reader for report and resume.
package results

import (
	"encoding/csv"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// Columns is the header of a results file, in order; "text" is appended when
// the input text is copied, then the token columns (after every column
// that was there before them, so that a script reading by position reads
// what it read).
var columns = []string{"request_id", "status", "label", "score", "outcome", "model",
	"attempts", "latency_ms", "error", "queued_ms", "started_ms", "finished_ms"}

// tokenColumns are the tokens a chat model's call cost, as its usage said.
var tokenColumns = []string{"prompt_tokens", "completion_tokens"}

// costColumns are what the row's calls cost in USD (blank when no price
// is known), and whether its answer came from the response cache.
var costColumns = []string{"cost_usd", "cached"}

// Columns returns the header, with the text column when includeText is set.
func Columns(includeText bool) []string {
	c := legacyColumns(includeText)
	c = append(c, tokenColumns...)
	return append(c, costColumns...)
}

// Extra are the columns after cached, each written only when its feature
// is on, in this order (later features add theirs after them).
type Extra struct {
	// RawScore: raw_score, the model's own score, with --calibration
	// (score is then the calibrated one).
	RawScore bool
	// Review: review, true for a row to be checked by a person
	// (--review-below).
	Review bool
	// Stage: stage, the number (from 1) of the cascade's stage that
	// answered the row, or where it ended (--cascade); blank for a row
	// that reached none.
	Stage bool
	// CachedTokens: cached_prompt_tokens, the part of prompt_tokens the
	// server read from its prompt cache (a chat model's run).
	CachedTokens bool
	// Scores: scores, the labels the answer scored and their scores,
	// best first, as label=score pairs joined by ';' (--top-k,
	// --multi-label); TopK, when set, writes the first TopK of them.
	Scores bool
	TopK   int
}

// LabelScore is a label and the score an answer gave it.
type LabelScore = provider.LabelScore

// extraColumns are the names of Extra's columns, in order.
var extraColumns = []string{"raw_score", "review", "stage", "cached_prompt_tokens", "scores"}

func (e Extra) on() []bool { return []bool{e.RawScore, e.Review, e.Stage, e.CachedTokens, e.Scores} }

// Columns are the extra columns e turns on, in order.
func (e Extra) Columns() []string {
	var c []string
	for i, on := range e.on() {
		if on {
			c = append(c, extraColumns[i])
		}
	}
	return c
}

// extraOf reads which extra columns a header's tail names; ok is false
// when the tail is not extra columns in their order.
func extraOf(tail []string) (e Extra, ok bool) {
	i := 0
	for _, name := range tail {
		for i < len(extraColumns) && extraColumns[i] != name {
			i++
		}
		if i == len(extraColumns) {
			return Extra{}, false
		}
		switch name {
		case "raw_score":
			e.RawScore = true
		case "review":
			e.Review = true
		case "stage":
			e.Stage = true
		case "cached_prompt_tokens":
			e.CachedTokens = true
		case "scores":
			e.Scores = true
		}
		i++
	}
	return e, true
}

// Header is the whole header a writer with these settings writes.
func Header(includeText bool, e Extra) []string {
	return append(Columns(includeText), e.Columns()...)
}

// readable are the headers --resume and report read: today's, and those
// written before the cost columns and before the token columns.
func readable(includeText bool) [][]string {
	now := Columns(includeText)
	n := len(now)
	return [][]string{now, now[:n-len(costColumns)], now[:n-len(costColumns)-len(tokenColumns)]}
}

// legacyColumns is the header written before the token columns: --resume
// and report still read such files.
func legacyColumns(includeText bool) []string {
	c := append([]string(nil), columns...)
	if includeText {
		c = append(c, "text")
	}
	return c
}

// Row is one result. Times are milliseconds since the run began; StartedMs
// is -1 for a row that was never sent.
type Row struct {
	Seq        int64 // input position; not written
	RequestID  string
	Label      string
	Score      float64
	Outcome    outcome.Code
	Model      string
	Attempts   int
	LatencyMs  int64
	Error      string
	QueuedMs   int64
	StartedMs  int64
	FinishedMs int64
	Text       string
	// PromptTokens and CompletionTokens are the usage the provider
	// reported for the row's calls; Tokens is false when it reported none
	// (written blank).
	PromptTokens, CompletionTokens int
	Tokens                         bool
	// CachedPromptTokens is the part of PromptTokens the server read from
	// its prompt cache (written with Extra.CachedTokens, blank when
	// Tokens is false).
	CachedPromptTokens int
	// Scores are the labels the answer scored, best first (written with
	// Extra.Scores, the first Extra.TopK of them when it is set).
	Scores []LabelScore
	// CostUSD is what the row's calls cost, as the spend ledger priced
	// their usage; Costed is false when no price was known (written
	// blank). A row answered without a call costs 0.
	CostUSD float64
	Costed  bool
	// Cached: the answer came from the response cache, without a call.
	Cached bool
	// RawScore is the model's own score when Score is a calibrated one
	// (written with Extra.RawScore; NaN: blank). Review marks a row for a
	// person to check (written with Extra.Review).
	RawScore float64
	Review   bool
	// Stage is the number (from 1) of the cascade's stage that answered
	// the row, or where it ended; 0 for a row no stage was asked for
	// (written with Extra.Stage; 0: blank).
	Stage int
	// Gold is the row's gold label (--gold-column), for the evaluation;
	// not written.
	Gold string
	// RetryAfter is when a caller may try again (serve's Retry-After on a
	// 503); not written.
	RetryAfter time.Duration
}

// Status is the HTTP status for the row's outcome.
func (r Row) Status() int { return r.Outcome.Status() }

// RoundScore is a score as results are written: four decimal places.
func RoundScore(f float64) float64 { return math.Round(f*1e4) / 1e4 }

// formatScore is a score as written: 4 places, blank for a row with no
// label or no score.
func (r Row) formatScore(f float64) string {
	if r.Label == "" || math.IsNaN(f) {
		return ""
	}
	return FormatScore(f)
}

// FormatScore is a score as results write it: rounded to 4 places.
func FormatScore(f float64) string { return strconv.FormatFloat(RoundScore(f), 'f', -1, 64) }

func (r Row) record(dst []string, includeText, raw bool, extra Extra) []string {
	dst = dst[:0]
	score, started, latency := r.formatScore(r.Score), "", ""
	if r.StartedMs >= 0 {
		started = strconv.FormatInt(r.StartedMs, 10)
		latency = strconv.FormatInt(r.LatencyMs, 10)
	}
	// Text, label and error come from outside the operator: guarded (see
	// Guard). The id is the operator's own key: as it is.
	guard := Guard
	if raw {
		guard = func(s string) string { return s }
	}
	dst = append(dst, r.RequestID, strconv.Itoa(r.Status()), guard(r.Label), score, string(r.Outcome),
		r.Model, strconv.Itoa(r.Attempts), latency, guard(r.Error),
		strconv.FormatInt(r.QueuedMs, 10), started, strconv.FormatInt(r.FinishedMs, 10))
	if includeText {
		dst = append(dst, guard(r.Text))
	}
	if r.Tokens {
		dst = append(dst, strconv.Itoa(r.PromptTokens), strconv.Itoa(r.CompletionTokens))
	} else {
		dst = append(dst, "", "")
	}
	cost := ""
	if r.Costed {
		cost = FormatUSD(r.CostUSD)
	}
	dst = append(dst, cost, strconv.FormatBool(r.Cached))
	if extra.RawScore {
		dst = append(dst, r.formatScore(r.RawScore))
	}
	if extra.Review {
		dst = append(dst, strconv.FormatBool(r.Review))
	}
	if extra.Stage {
		stage := ""
		if r.Stage > 0 {
			stage = strconv.Itoa(r.Stage)
		}
		dst = append(dst, stage)
	}
	if extra.CachedTokens {
		cached := ""
		if r.Tokens {
			cached = strconv.Itoa(r.CachedPromptTokens)
		}
		dst = append(dst, cached)
	}
	if extra.Scores {
		dst = append(dst, guard(FormatScores(r.Scores, extra.TopK)))
	}
	return dst
}

// FormatScores writes scores as the scores column holds them: label=score
// pairs (the score to 4 places) joined by ';', the first k of them (k 0:
// all).
func FormatScores(scores []LabelScore, k int) string {
	if k > 0 && len(scores) > k {
		scores = scores[:k]
	}
	var b strings.Builder
	for i, s := range scores {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(s.Label)
		b.WriteByte('=')
		if math.IsNaN(s.Score) {
			continue
		}
		b.WriteString(FormatScore(s.Score))
	}
	return b.String()
}

// JSONScore is one label=score pair of the scores column as JSON (serve's
// answers, the queue's result.scores): the score rounded as the column
// rounds it, null when the answer gave the label none.
type JSONScore struct {
	Label string   `json:"label"`
	Score *float64 `json:"score"`
}

// JSONScores are scores as JSON holds them, the first k of them (k 0:
// all), as FormatScores writes them; nil for none.
func JSONScores(scores []LabelScore, k int) []JSONScore {
	if k > 0 && len(scores) > k {
		scores = scores[:k]
	}
	var out []JSONScore
	for _, s := range scores {
		v := JSONScore{Label: s.Label}
		if !math.IsNaN(s.Score) {
			sc := RoundScore(s.Score)
			v.Score = &sc
		}
		out = append(out, v)
	}
	return out
}

// FromJSONScores is the inverse of JSONScores: a null score is NaN.
func FromJSONScores(js []JSONScore) []LabelScore {
	var out []LabelScore
	for _, v := range js {
		s := math.NaN()
		if v.Score != nil {
			s = *v.Score
		}
		out = append(out, LabelScore{Label: v.Label, Score: s})
	}
	return out
}

// ParseScores reads a scores cell back (FormatScores's); a pair it cannot
// read is left out. A label holding '=' is read up to its last '='.
func ParseScores(cell string) []LabelScore {
	if cell == "" {
		return nil
	}
	var out []LabelScore
	for _, pair := range strings.Split(cell, ";") {
		i := strings.LastIndexByte(pair, '=')
		if i <= 0 {
			continue
		}
		s := math.NaN()
		if v, err := strconv.ParseFloat(pair[i+1:], 64); err == nil {
			s = v
		}
		out = append(out, LabelScore{Label: pair[:i], Score: s})
	}
	return out
}

// FormatUSD writes an amount of USD as results and summaries show it: to
// the ten-billionth, without trailing zeros (a call of a cheap model costs
// millionths).
func FormatUSD(usd float64) string {
	return strconv.FormatFloat(math.Round(usd*1e10)/1e10, 'f', -1, 64)
}

// Writer writes result rows and flushes after every Write, so that a row is
// in the file (in the kernel's hands) as soon as it is written: a kill -9
// loses nothing already written.
type Writer struct {
	mu          sync.Mutex
	cw          *csv.Writer
	includeText bool
	raw         bool
	extra       Extra
	rec         []string
	frozen      atomic.Bool
}

// Option tunes a Writer.
type Option func(*Writer)

// Raw turns the formula guard off when raw is set (classify --raw-csv):
// text, label and error are written exactly as they are, for programs that
// read the file. Readers (Stream, hfsent report) always undo the guard, so
// a raw field that begins with ' followed by = + - @ tab CR or ' reads back
// without that first '.
func Raw(raw bool) Option { return func(w *Writer) { w.raw = raw } }

// WithExtra writes the extra columns e turns on.
func WithExtra(e Extra) Option { return func(w *Writer) { w.extra = e } }

// NewWriter writes the header to w. By default text, label and error are
// written with the formula guard (see Guard).
func NewWriter(w io.Writer, includeText bool, opts ...Option) (*Writer, error) {
	rw := &Writer{cw: csv.NewWriter(w), includeText: includeText}
	for _, o := range opts {
		o(rw)
	}
	if err := rw.cw.Write(Header(includeText, rw.extra)); err != nil {
		return nil, err
	}
	rw.cw.Flush()
	return rw, rw.cw.Error()
}

// Write appends rows and flushes them.
func (w *Writer) Write(rows []Row) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.frozen.Load() {
		return ErrFrozen
	}
	for _, r := range rows {
		w.rec = r.record(w.rec, w.includeText, w.raw, w.extra)
		if err := w.cw.Write(w.rec); err != nil {
			return err
		}
	}
	w.cw.Flush()
	return w.cw.Error()
}

// Freeze refuses every later write and waits for a write in progress to
// end, so that the process can exit at once (a second Ctrl-C) without
// leaving a torn row; but not for longer than FreezeWait: a write stuck on a
// stalled pipe or disk must not keep the process from quitting. It reports
// whether the last write ended whole.
func (w *Writer) Freeze() bool {
	w.frozen.Store(true)
	deadline := time.Now().Add(FreezeWait)
	for !w.mu.TryLock() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.mu.Unlock()
	return true
}

// FreezeWait bounds how long Freeze waits for a write in progress.
const FreezeWait = time.Second

// ErrFrozen is returned by Write after Freeze.
var ErrFrozen = errors.New("results writer closed")
