package queue

// What a worker claims, and what it sends back: the rows of a round trip
// (Session.Cycle).

import "time"

// Claimed is a row a worker holds under a lease.
type Claimed struct {
	Seq       int64
	Attempt   int // claims so far, this one included: the fence
	RequestID string
	Text      string
	// Reserved: the row is reserved for this worker, not running. It
	// stays pending (it does not count against the caps) and the worker
	// starts it only in the place of a row of its own that finished (see
	// Completion.Promote) or once a claim promotes it; Attempt is the
	// attempt it will run as.
	Reserved bool
}

// Action says what a completion does to its row.
type Action string

const (
	// Finish records the result as final: the row is done.
	Finish Action = "done"
	// Retry records the result as the row's last failure and puts it back
	// to pending, due after a backoff.
	Retry Action = "retry"
	// GiveBack puts the row back to pending at once, as if never claimed
	// (when never sent): it was claimed but not started.
	GiveBack Action = "giveback"
)

// Completion is a worker's result for a row it claimed.
type Completion struct {
	Seq     int64
	Attempt int
	Action  Action
	Delay   time.Duration // Retry: when the row is due again

	Outcome   string
	Label     string
	Score     float64
	Model     string
	Attempts  int   // provider calls for the row in this claim
	LatencyMs int64 // first call to answer
	Error     string
	WaitMs    int64 // from the claim to the first call; -1: never sent
	TotalMs   int64 // from the claim to the result
	// PromptTokens and CompletionTokens: the usage reported for this
	// claim's calls; nil when none was.
	PromptTokens, CompletionTokens *int32
	// CostUSD is what this claim's calls cost at the worker's prices (nil:
	// none known); Cached: the cache answered it, without a call.
	CostUSD *float64
	Cached  bool
	// RawScore is the model's own score under a calibrated one (NaN: it
	// gave none; nil: no calibration); Review marks the row for review
	// (nil: no --review-below).
	RawScore *float64
	Review   *bool
	// Stage is the --cascade stage that answered (nil: no cascade, or
	// none asked).
	Stage *int16
	// CachedPromptTokens: the part of PromptTokens the server read from
	// its prompt cache (nil: no usage reported, or not a chat model);
	// Scores: the answer's scores as JSON, results.JSONScores's (nil:
	// no --top-k or --multi-label, or no label).
	CachedPromptTokens *int32
	Scores             *string

	// Promote is a reservation of this worker's that it started in this
	// row's place when this row's call ended: the round trip makes it
	// running, fenced on this row still running under this worker with
	// its lease (so the swap takes exactly the room this row frees, in the
	// transaction that frees it).
	Promote *Claimed
}

// CycleIn is what one cycle writes and asks.
type CycleIn struct {
	Done []Completion
	Want int // rows to claim at most
	// Reserve asks for up to this many rows reserved, beside the claim
	// (batches that reserve: see Session.Reserves). Promote lists the
	// worker's reservations to run first, within the room Want claims.
	Reserve int
	Promote []int64
	// Release gives back reservations the worker will not start.
	Release []int64
	// PauseFor and OpenFor report this worker's own 429 pause and open
	// breaker, as durations from now (the database clock adds them).
	PauseFor, OpenFor time.Duration
	// Fallback: claim while a shared breaker is open (the worker's fallback
	// model answers); without it no row is claimed then.
	Fallback bool
	// AskRemaining asks whether the batch has rows pending or running.
	AskRemaining bool
	// Reconcile gives back the rows leased to this worker that it does not
	// hold (Held): claims committed in a round trip whose answer was lost.
	Reconcile bool
	Held      []int64
}

// CycleOut is what one cycle did and saw.
type CycleOut struct {
	Claimed []Claimed // running (Reserved false) or reserved
	// Promoted are the reservations the completions' Promote made
	// running.
	Promoted []int64
	// Written are the completions the fence let through; the others were
	// discarded (the row's lease had passed to another worker).
	Written   int
	Discarded []Completion
	// Paused and Open are how long the batch's shared pause and breaker
	// still hold (0: not).
	Paused, Open time.Duration
	Remaining    bool // set when asked
}
