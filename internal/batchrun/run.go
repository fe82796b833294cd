// Package batchrun classifies rows through an OpenAI-style Batch API
// (hfsent classify --batch-api): it decides which rows need a call (not
// kept from earlier results, not invalid, not a cache hit, not a repeated
// text), streams their requests into batches within the provider's
// limits, records every batch beside the output as soon as it exists,
// waits for them, reads their output and error files into answers, and
// sends again only the rows a batch left unanswered. The answers are then
// written through the engine like live ones (Replay), so the results file,
// its outcomes, the cache and the spend are the same.
package batchrun

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/hfsent/hfsent/internal/batchapi"
	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// Defaults of the limits (OpenAI's: 50,000 requests and 200 MB a file).
const (
	DefaultMaxRequests    = 50_000
	DefaultMaxBytes       = 200_000_000
	DefaultPoll           = 30 * time.Second
	DefaultMaxSubmissions = 3
	// MaxResultLine bounds one line of an output or error file: an answer
	// over the live call's 4 MiB bound is refused as it is live.
	MaxResultLine = 8 << 20
)

// Config is one batch run.
type Config struct {
	API  *batchapi.Client
	Chat *provider.Chat
	// Open reads INPUT again from its first row: the rows are read once to
	// submit them and again to send a batch's missing rows, never held.
	Open func() (engine.Source, func(), error)
	// Prior is the outcome of row seq in the earlier results (--resume),
	// "" when there is none; it is asked of every row, in input order.
	Prior func(seq int64) (outcome.Code, error)
	// Journal is the file beside the output recording the batches.
	Journal string
	// CancelRunning (--batch-cancel) cancels the recorded batches still
	// running and submits nothing: the rows they completed are kept.
	CancelRunning bool
	// KeepFiles (--batch-keep-files) leaves every file at the provider.
	// Without it a batch's input file is deleted once the batch has ended,
	// and its output and error files once the results are written
	// (Finished): a provider caps an account's file storage (tidy.go).
	KeepFiles bool
	// Rows is INPUT's data rows, counted before the run (the answers'
	// table is sized once); 0: it grows.
	Rows           int64
	MaxRequests    int
	MaxBytes       int64
	Poll           time.Duration // the first wait between polls
	MaxPoll        time.Duration // the longest, while nothing changes; default 5×Poll, at most 10m
	MaxSubmissions int           // times a row is submitted before it is left missing
	Rules          engine.Rules
	Dedupe         bool
	// Cache and Keys: a row whose request the cache holds is not
	// submitted (the engine answers it from the cache).
	Cache    *cache.Cache
	Keys     *cache.Keyer
	Progress func(Progress)
	Logger   *slog.Logger
}

func (c *Config) defaults() {
	if c.MaxRequests <= 0 {
		c.MaxRequests = DefaultMaxRequests
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.Poll <= 0 {
		c.Poll = DefaultPoll
	}
	if c.MaxPoll <= 0 {
		c.MaxPoll = min(5*c.Poll, 10*time.Minute)
	}
	c.MaxPoll = max(c.MaxPoll, c.Poll)
	if c.MaxSubmissions <= 0 {
		c.MaxSubmissions = DefaultMaxSubmissions
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Prior == nil {
		c.Prior = func(int64) (outcome.Code, error) { return "", nil }
	}
}

// Progress is what the batches have done so far, from their
// request_counts.
type Progress struct {
	Batches, Running int
	Total            int64 // rows in the batches
	Completed        int64
	Failed           int64
	Status           string // the least advanced running batch's status
}

// Stats is what a batch run did, for the summary and its closing line.
type Stats struct {
	Batches     int   // batches created by this run (re-creations after a token-limit refusal too)
	Recorded    int   // batches found in the journal (--resume)
	Uploads     int   // files uploaded
	Submitted   int64 // rows sent in a batch by this run (first submissions and resubmissions)
	Resubmitted int64 // of them, rows a batch had left unanswered
	Answered    int64 // rows a batch answered with a label
	Failed      int64 // rows a batch answered with an error (the error file, a failed batch)
	Missing     int64 // rows no batch answered after every submission allowed
	NotSent     int64 // rows that needed a call but were never submitted (--batch-cancel)
	Running     int   // batches still running at the provider when the run stopped
	Cancelled   int   // batches cancelled by --batch-cancel
	Deleted     int   // files deleted at the provider (inputs, outputs, errors)
}

// ErrInterrupted is returned when the run was stopped while batches were
// running: they go on at the provider, recorded in the journal.
var ErrInterrupted = errors.New("interrupted while batches were running")

// textKey identifies a text: the answers are found by it, as the engine
// asks by text.
type textKey [16]byte

func keyOf(text string) textKey {
	h := sha256.Sum256([]byte(text))
	var k textKey
	copy(k[:], h[:])
	return k
}

// Row states.
const (
	pending  uint8 = iota // submitted, no answer yet
	answered              // a label (pred)
	failed                // an error (err)
	missing               // no batch answered it in the submissions allowed
)

// slot is one submitted row's answer, kept small: there is one per row
// submitted, for the whole run.
type slot struct {
	batch int32 // its batch now: the latest that holds it
	used  bool  // the row is in a batch
	subs  uint8
	state uint8
	known bool // usage known
	label int16
	// costed: the provider said what the call cost (cost).
	costed             bool
	prompt, completion int32
	score, cost        float64
	err                int32 // in Runner.errs, when failed
}

// batch is one batch of the run, recorded or created.
type batch struct {
	idx     int
	id      string
	file    string
	rows    Rows
	n       int64
	status  string
	counts  batchapi.RequestCounts
	ended   bool
	held    bool // refused for the enqueued-token limit: created again once earlier batches end
	refused int  // times refused so
	mine    bool // cancelled by the user: its missing rows are not sent again
	read    bool // its output and error files are read
	// outputs are its output and error files' ids, once it has ended and
	// said them (tidy.go); dropped: its input file is deleted.
	outputs []string
	dropped bool
}

// Runner runs the batches of one classify run.
type Runner struct {
	cfg     Config
	j       *journal
	batches []*batch
	slots   []slot            // by input position
	byText  map[textKey]int32 // a text's row: the one whose answer it takes
	errs    []*provider.Error
	labels  map[string]int16
	stats   Stats
}

// New prepares a run: it reads the journal, if there is one.
func New(cfg Config) (*Runner, error) {
	cfg.defaults()
	recs, err := readJournal(cfg.Journal)
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, slots: make([]slot, 0, max(cfg.Rows, 0)), byText: map[textKey]int32{}, labels: map[string]int16{}}
	for i, l := range cfg.Chat.Labels() {
		r.labels[l] = int16(i)
	}
	if err := r.load(recs); err != nil {
		return nil, err
	}
	return r, nil
}

// Recorded is how many batches the journal holds.
func (r *Runner) Recorded() int { return len(r.batches) }

// load rebuilds the batches and the rows they hold from the journal.
func (r *Runner) load(recs []record) error {
	byID := map[string]*batch{}
	byFile := map[string]*batch{} // pending: file id -> its batch, not yet created
	for _, rec := range recs {
		switch {
		case rec.Replace != "":
			b := byID[rec.Replace]
			if b == nil {
				return fmt.Errorf("%s: batch %s replaces %s, which it does not record", r.cfg.Journal, rec.Batch, rec.Replace)
			}
			delete(byID, rec.Replace)
			b.id = rec.Batch
			byID[b.id] = b
		case rec.Cancel:
			if b := byID[rec.Batch]; b != nil {
				b.mine = true
			}
		case !rec.Pending && rec.File != "" && byFile[rec.File] != nil:
			// The batch a pending record was waiting for.
			b := byFile[rec.File]
			delete(byFile, rec.File)
			b.id = rec.Batch
			byID[b.id] = b
		default:
			if rec.Rows == nil {
				return fmt.Errorf("%s: batch %s records no rows", r.cfg.Journal, rec.Batch)
			}
			b := &batch{idx: len(r.batches), id: rec.Batch, file: rec.File, rows: *rec.Rows, n: rec.N}
			r.batches = append(r.batches, b)
			if rec.Pending {
				b.id = ""
				byFile[rec.File] = b
			} else {
				byID[b.id] = b
			}
			b.rows.Each(func(seq int64) bool {
				s := r.slotAt(seq)
				s.batch, s.subs = int32(b.idx), min(s.subs+1, 255)
				return true
			})
		}
	}
	r.stats.Recorded = len(r.batches)
	return nil
}

// Run submits what needs submitting, waits for every batch and reads its
// answers. ErrInterrupted: ctx ended while batches were running.
func (r *Runner) Run(ctx context.Context) error {
	j, err := openJournal(r.cfg.Journal)
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", r.cfg.Journal, err)
	}
	r.j = j
	defer j.close()
	if err := r.adoptPending(ctx); err != nil {
		return r.stopped(ctx, err)
	}
	if r.cfg.CancelRunning {
		if err := r.cancelAll(ctx); err != nil {
			return err
		}
	}
	if err := r.scan(ctx); err != nil {
		return r.stopped(ctx, err)
	}
	r.skipDone()
	if err := r.wait(ctx); err != nil {
		return r.stopped(ctx, err)
	}
	r.count()
	return nil
}

// skipDone marks ended, without asking, every recorded batch none of
// whose rows is still needed (all kept from the earlier results).
func (r *Runner) skipDone() {
	for _, b := range r.batches {
		if !b.ended && len(r.owned(b)) == 0 {
			b.ended, b.read = true, true
		}
	}
}

// Finished removes the journal once the results of every batch are
// written (the caller knows): no batch is left to collect, and a row
// still without an answer is not final, so --resume submits it afresh.
// Then, without KeepFiles, it deletes the batches' files at the provider:
// with the journal gone no run reads them again (a failure is a warning).
func (r *Runner) Finished(ctx context.Context) error {
	for _, b := range r.batches {
		if !b.ended {
			return nil
		}
	}
	if err := os.Remove(r.cfg.Journal); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err // kept: a --resume may still read the batches' files
	}
	r.tidy(ctx)
	return nil
}

// stopped is err, or ErrInterrupted when ctx ended with batches running.
func (r *Runner) stopped(ctx context.Context, err error) error {
	r.count()
	if ctx.Err() != nil {
		return ErrInterrupted
	}
	return err
}

// count fills the stats of the rows from their slots.
func (r *Runner) count() {
	r.stats.Answered, r.stats.Failed, r.stats.Missing, r.stats.Running = 0, 0, 0, 0
	for i := range r.slots {
		s := &r.slots[i]
		if !s.used {
			continue
		}
		switch s.state {
		case answered:
			r.stats.Answered++
		case failed:
			r.stats.Failed++
		case missing:
			r.stats.Missing++
		}
	}
	for _, b := range r.batches {
		if !b.ended {
			r.stats.Running++
		}
	}
}

// at is row seq's slot, nil when the row is in no batch. The pointer is
// good until the next slotAt.
func (r *Runner) at(seq int64) *slot {
	if seq < 0 || seq >= int64(len(r.slots)) || !r.slots[seq].used {
		return nil
	}
	return &r.slots[seq]
}

// slotAt is row seq's slot, made when there is none.
func (r *Runner) slotAt(seq int64) *slot {
	if n := int64(len(r.slots)); seq >= n {
		r.slots = append(r.slots, make([]slot, seq+1-n)...)
	}
	s := &r.slots[seq]
	if !s.used {
		*s = slot{used: true, err: -1, label: -1}
	}
	return s
}

// setAnswer keeps p as s's answer.
func (r *Runner) setAnswer(s *slot, p provider.Prediction) {
	l, ok := r.labels[p.Label]
	if !ok {
		r.setError(s, &provider.Error{Outcome: outcome.UpstreamUnlabelled, NoRetry: true, Msg: "the answer names no label of --labels"})
		return
	}
	s.state, s.label, s.score = answered, l, p.Score
	s.known, s.prompt, s.completion = p.Usage.Known, int32(p.Usage.Prompt), int32(p.Usage.Completion)
	s.costed, s.cost = p.Usage.Costed, p.Usage.Cost
}

// setError keeps e as s's answer.
func (r *Runner) setError(s *slot, e *provider.Error) {
	s.state, s.err = failed, int32(len(r.errs))
	r.errs = append(r.errs, e)
}

// prediction is s's answer as the client gave it.
func (r *Runner) prediction(s *slot) provider.Prediction {
	return provider.Prediction{Label: r.cfg.Chat.Labels()[s.label], Score: s.score,
		Usage: provider.Usage{Prompt: int(s.prompt), Completion: int(s.completion), Known: s.known, Cost: s.cost, Costed: s.costed}}
}

// Stats is what the run did.
func (r *Runner) Stats() Stats { return r.stats }

// JournalPath is where the batches are recorded.
func (r *Runner) JournalPath() string { return r.cfg.Journal }
