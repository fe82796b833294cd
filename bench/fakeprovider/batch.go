package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// batchFlags are the flags of -batch: OpenAI's Batch and Files API under
// /v1 (fakehf.Batch), the API root being http://ADDR/v1.
type batchFlags struct {
	on             *bool
	steps          *int
	stepTime       *time.Duration
	expireAfter    *int
	cancelAfter    *int
	tokenLimit     *int
	maxRequests    *int
	maxBytes       *int64
	markUnanswered *bool
	token          *string
	dir            *string
}

func addBatchFlags() batchFlags {
	return batchFlags{
		on:             flag.Bool("batch", false, "serve OpenAI's Batch and Files API under /v1 (API root http://ADDR/v1: POST /v1/files, POST /v1/batches, GET /v1/batches/ID, POST /v1/batches/ID/cancel, GET /v1/files/ID/content), each line answered as -chat answers it, and /v1/chat/completions live (fakehf.Batch)"),
		steps:          flag.Int("batch-steps", 1, "with -batch: steps a batch stays in each of validating, in_progress and finalizing; a step is one poll of that batch unless -batch-step-time"),
		stepTime:       flag.Duration("batch-step-time", 0, "with -batch: a step is this much time from the batch's creation, and polls do not move it: the fake's processing time is 3 x steps x this a batch (0: a step is a poll)"),
		expireAfter:    flag.Int("batch-expire-after", 0, "with -batch: each batch answers at most this many lines, then ends expired with them in its output (0: never)"),
		cancelAfter:    flag.Int("batch-cancel-after", 0, "with -batch: the provider cancels each batch after this many lines, keeping them (0: never)"),
		tokenLimit:     flag.Int("batch-token-limit", 0, "with -batch: the enqueued-token cap (about a token per 4 bytes of request body, over batches not ended); a batch over it fails token_limit_exceeded (0: none)"),
		maxRequests:    flag.Int("batch-max-requests", fakehf.OpenAIMaxRequests, "with -batch: a batch of more lines fails validation (OpenAI's 50,000; 0: no limit)"),
		maxBytes:       flag.Int64("batch-max-bytes", fakehf.OpenAIMaxFileBytes, "with -batch: an upload larger is refused 400 File is too large. (OpenAI's 200 MB; 0: no limit)"),
		markUnanswered: flag.Bool("batch-mark-unanswered", false, "with -batch: lines an expired or cancelled batch never answered go to its error file as batch_expired / batch_cancelled, as OpenAI writes them"),
		token:          flag.String("batch-token", "", "with -batch: the only bearer token accepted (401 otherwise)"),
		dir:            flag.String("batch-dir", "", "with -batch: where the files are kept (default: a temporary directory, removed on exit)"),
	}
}

func (f batchFlags) fake(chat *fakehf.Chat) *fakehf.Batch {
	return &fakehf.Batch{Chat: chat, Steps: *f.steps, StepTime: *f.stepTime, ExpireAfter: *f.expireAfter,
		CancelAfter: *f.cancelAfter, TokenLimit: *f.tokenLimit, MaxRequests: noLimit(*f.maxRequests),
		MaxFileBytes: noLimit(*f.maxBytes), MarkUnanswered: *f.markUnanswered, Token: *f.token, Dir: *f.dir}
}

// noLimit maps a limit flag's 0 (no limit) to the fake's -1: the fake's 0
// is OpenAI's limit.
func noLimit[T int | int64](n T) T {
	if n == 0 {
		return -1
	}
	return n
}

// reportBatch prints what the batch fake was asked to do, and its
// processing time: from the first batch's creation to the last one's end
// on the fake's clock (with -batch-step-time, what the batches would take
// however often they were polled), for a benchmark to set its wall time
// against.
func reportBatch(w io.Writer, b *fakehf.Batch) {
	c := b.Counts()
	snap := b.Snapshot()
	var first, last time.Time
	statuses := map[string]int{}
	for _, s := range snap {
		statuses[s.Status]++
		if first.IsZero() || s.CreatedAt.Before(first) {
			first = s.CreatedAt
		}
		if s.EndedAt.After(last) {
			last = s.EndedAt
		}
	}
	var processing time.Duration
	if !last.IsZero() {
		processing = last.Sub(first)
	}
	var st []string
	for k, n := range statuses {
		st = append(st, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(st)
	fmt.Fprintf(w, "fakeprovider: batch uploads=%d creates=%d polls=%d downloads=%d cancels=%d live=%d lines=%d peak_enqueued_tokens=%d batches=%d %s processing_ms=%d\n",
		c.Uploads, c.Creates, c.Polls, c.Downloads, c.Cancels, c.Live, c.Lines, c.PeakEnqueued, len(snap), strings.Join(st, " "), processing.Milliseconds())
}
