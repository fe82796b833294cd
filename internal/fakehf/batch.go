package fakehf

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Batch is a fake of OpenAI's Batch API (and of the Files API it reads its
// input from), as OpenAI-style providers serve it under their API root:
//
//	POST {root}/files                multipart: purpose=batch, file=<jsonl>
//	GET  {root}/files/{id}           the file object
//	GET  {root}/files/{id}/content   the file's bytes (input, output or error)
//	DELETE {root}/files/{id}         {"id", "object": "file", "deleted": true}
//	POST {root}/batches              {"input_file_id", "endpoint", "completion_window"}
//	GET  {root}/batches              a page of the batches, newest first (?limit=, ?after=)
//	GET  {root}/batches/{id}         the batch object
//	POST {root}/batches/{id}/cancel  cancelling, then cancelled
//	POST {root}/chat/completions     live calls, answered by Chat
//
// The shapes are openai-python's types (batch.py, batch_request_counts.py,
// batch_error.py, file_object.py) and the request/output line formats of
// OpenAI's batch guide. Each request line is answered through the Chat
// fake's own handler (its magic texts, structured outputs and errors), so a
// line answers exactly what the same body answers live: a 200 goes to the
// output file, anything else to the error file with its status and body
// (#context# is a 400 context_length_exceeded there; #429# is a 429 the
// first time its text is sent in any batch, then answered, as live).
//
// The fake's clock. A batch moves validating -> in_progress -> finalizing ->
// completed, Steps steps in each. A step is one poll of that batch (GET
// {root}/batches/{id}) when StepTime is 0, so a test controls progress
// exactly, and the poll that makes a step does its work before answering.
// With StepTime set, a step is StepTime of wall time from the batch's
// creation, taken by a worker goroutine of the batch's own, and polls do
// not move it (nor wait on it): a benchmark's wall time can be set against
// the fake's processing time (3*Steps*StepTime a batch, more if the machine
// is too busy for the work; Snapshot's EndedAt - CreatedAt is what it
// took). Lines are answered during in_progress: after in_progress step i
// (0-based) about (i+1)/(Steps+1) of them, the rest on entering
// finalizing, so request_counts grow while a client polls.
//
// Storage. Uploaded files and the output and error files are kept on disk
// in Dir, never whole in memory: the input is read a line at a time as the
// batch works, and each answer is appended to its output or error file as
// it is made, so a download is a plain stream of a file and answers are
// made once (the Chat's first-time magic, like #429#, does not answer
// differently on a second download).
//
// Set its fields before the first request. It is safe for concurrent use.
type Batch struct {
	// Chat answers each request line's body as the live chat fake would
	// (nil: &Chat{} defaults), and serves {root}/chat/completions live.
	// Lines are answered by a copy of its answering settings (Answer,
	// Backend, RefuseLogprobs, Context*, Truncate, Raw), without its
	// Latency, Token, Bucket or BusyFirst: a batch is not paced by, and
	// does not charge, the live limits.
	Chat *Chat
	// Steps is how many steps a batch stays in each of validating,
	// in_progress and finalizing (0: 1).
	Steps int
	// StepTime, when set, makes a step StepTime of wall time from the
	// batch's creation instead of one poll.
	StepTime time.Duration
	// ExpireAfter > 0: each batch answers at most this many lines, then
	// ends "expired" at the end of in_progress with the lines it answered
	// in its output and error files (the rest absent from both, unless
	// MarkUnanswered).
	ExpireAfter int
	// CancelAfter > 0: the provider cancels a batch once it has answered
	// this many lines ("cancelling", then "cancelled" a step later; the
	// answered lines kept).
	CancelAfter int
	// TokenLimit > 0 is the enqueued-token cap: the sum of BatchTokens of
	// the request bodies over the batches accepted and not yet ended. A
	// batch created over it is answered "validating" and ends "failed" at
	// the end of validating with errors.data[0].code "token_limit_exceeded"
	// (OpenAI's message); it reserves nothing, and once an earlier batch
	// has ended the same file can be submitted again.
	TokenLimit int
	// FailLine, when it says ok, answers that line in the error file with
	// the status and error code given, in OpenAI's error body (400
	// "context_length_exceeded" is the real message and param).
	FailLine func(customID string, body []byte) (status int, code string, ok bool)
	// Garble, when it says ok, writes line raw into the output file in
	// place of that line's answer (malformed JSON, a custom_id never sent).
	Garble func(customID string) (line []byte, ok bool)
	// MaxFileBytes: an upload larger is refused 400 "File is too large."
	// as OpenAI does. 0 is OpenAI's limit for a batch's input,
	// OpenAIMaxFileBytes; < 0 is none (a test or bench that sends more
	// says so).
	MaxFileBytes int64
	// RefuseChunked answers an upload sent without a Content-Length
	// (chunked) 400, as an API or a proxy that takes no chunked multipart
	// would.
	RefuseChunked bool
	// MaxRequests: a batch of more lines fails validation with
	// errors.data[0].code "too_many_requests". 0 is OpenAI's limit,
	// OpenAIMaxRequests; < 0 is none.
	MaxRequests int
	// Token, when set, is the only bearer token accepted on every route
	// (401 invalid_api_key otherwise, echoing the key it was sent, as some
	// servers do: a client must not copy the body into its errors).
	Token string
	// MarkUnanswered writes, for each line a batch never answered when it
	// ends expired or cancelled, an error-file line with "response": null
	// and "error": {"code": "batch_expired" | "batch_cancelled"}: OpenAI's
	// spec (BatchRequestOutputError) names those codes for exactly those
	// lines, and users report them in the error file of expired batches.
	// Off, the unanswered lines are absent from both files, as some
	// OpenAI-compatible providers leave them. Either way request_counts
	// does not count them as failed (an expired OpenAI batch has been seen
	// reporting total 10, completed 1, failed 0).
	MarkUnanswered bool
	// Dir is where the files are kept (empty: a temporary directory made
	// on first use, removed by Close).
	Dir string

	initOnce sync.Once
	initErr  error
	dir      string
	ownDir   bool
	line     *Chat
	mux      *http.ServeMux

	done      chan struct{} // closed by Close: the workers stop
	closeOnce sync.Once
	wg        sync.WaitGroup // the workers

	seq atomic.Int64 // ids

	mu           sync.Mutex // jobs, order, peakEnqueued; taken before a job's lock, never after
	jobs         map[string]*batchJob
	order        []*batchJob
	peakEnqueued int

	fmu   sync.Mutex // files; a leaf lock
	files map[string]*batchFile

	uploads, creates, polls, downloads, cancels, live, lines, deletes atomic.Int64
}

// OpenAI's limits on one batch, the fake's by default: its input file's
// size (200 MB, counted as hfsent counts it, batchrun.DefaultMaxBytes; if
// OpenAI means MiB the fake is the stricter) and its requests.
const (
	OpenAIMaxFileBytes = 200_000_000
	OpenAIMaxRequests  = 50_000
)

// BatchCounts is what a Batch was asked to do: uploads, creates, polls (GET
// of one batch), downloads (file content), cancels, live chat calls, the
// request lines its batches answered, and files deleted (a DELETE of a
// file it held); PeakEnqueued is the most tokens (BatchTokens) its
// accepted, unended batches held at once.
type BatchCounts struct {
	Uploads, Creates, Polls, Downloads, Cancels, Live, Lines, Deletes int64
	PeakEnqueued                                                      int64
}

// BatchInfo is one batch as the fake sees it. EndedAt - CreatedAt is the
// fake's processing time; EndedAt is zero until it ends.
type BatchInfo struct {
	ID, Status               string
	Lines, Completed, Failed int
	InputFileID              string
	OutputFileID             string
	ErrorFileID              string
	Tokens                   int
	Errors                   []string // errors.data[].code
	CreatedAt, EndedAt       time.Time
}

// BatchTokens is what a request body counts against TokenLimit:
// ChatTokens of the body (about one token per four bytes).
func BatchTokens(body []byte) int { return max(1, (len(body)+3)/4) }

// StartBatch runs b on a loopback server with everything under /v1, so the
// API root is srv.URL + "/v1".
func StartBatch(b *Batch) *httptest.Server { return httptest.NewServer(b.Handler()) }

// Handler is b's routes, under /v1.
func (b *Batch) Handler() http.Handler {
	b.init()
	return http.HandlerFunc(b.serve)
}

// Close stops b's workers (StepTime) and removes the files b kept, if it
// made their directory. Call it when done with b, before its Dir goes.
func (b *Batch) Close() error {
	b.closeOnce.Do(func() {
		if b.done != nil {
			close(b.done)
		}
	})
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, j := range b.order {
		j.mu.Lock()
		j.closeFiles()
		j.mu.Unlock()
	}
	if b.ownDir && b.dir != "" {
		return os.RemoveAll(b.dir)
	}
	return nil
}

// Counts is what b was asked to do so far.
func (b *Batch) Counts() BatchCounts {
	b.mu.Lock()
	peak := int64(b.peakEnqueued)
	b.mu.Unlock()
	return BatchCounts{PeakEnqueued: peak, Uploads: b.uploads.Load(), Creates: b.creates.Load(), Polls: b.polls.Load(),
		Downloads: b.downloads.Load(), Cancels: b.cancels.Load(), Live: b.live.Load(), Lines: b.lines.Load(), Deletes: b.deletes.Load()}
}

// Files are the ids of the files b holds now (uploaded, and the batches'
// output and error files), not deleted, sorted.
func (b *Batch) Files() []string {
	b.fmu.Lock()
	defer b.fmu.Unlock()
	ids := make([]string, 0, len(b.files))
	for id := range b.files {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Snapshot is every batch in creation order. It is not a poll: it moves
// nothing.
func (b *Batch) Snapshot() []BatchInfo {
	b.mu.Lock()
	jobs := append([]*batchJob(nil), b.order...)
	b.mu.Unlock()
	out := make([]BatchInfo, 0, len(jobs))
	now := time.Now()
	for _, j := range jobs {
		j.mu.Lock()
		b.advance(j, now)
		out = append(out, j.info())
		j.mu.Unlock()
	}
	return out
}

func (b *Batch) init() {
	b.initOnce.Do(func() {
		b.dir = b.Dir
		if b.dir == "" {
			b.dir, b.initErr = os.MkdirTemp("", "fakehf-batch-*")
			b.ownDir = true
		}
		if b.Chat == nil {
			b.Chat = &Chat{}
		}
		c := b.Chat
		b.line = &Chat{Answer: c.Answer, RefuseLogprobs: c.RefuseLogprobs, Backend: c.Backend,
			Context: c.Context, ContextAPI: c.ContextAPI, ContextModel: c.ContextModel,
			Truncate: c.Truncate, Raw: c.Raw, NoRecord: true}
		b.done = make(chan struct{})
		b.jobs = map[string]*batchJob{}
		b.files = map[string]*batchFile{}
		m := http.NewServeMux()
		m.HandleFunc("POST /v1/files", b.upload)
		m.HandleFunc("GET /v1/files/{id}", b.fileObject)
		m.HandleFunc("GET /v1/files/{id}/content", b.content)
		m.HandleFunc("DELETE /v1/files/{id}", b.deleteFile)
		m.HandleFunc("POST /v1/batches", b.create)
		m.HandleFunc("GET /v1/batches", b.list)
		m.HandleFunc("GET /v1/batches/{id}", b.get)
		m.HandleFunc("POST /v1/batches/{id}/cancel", b.cancel)
		m.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
			b.live.Add(1)
			b.Chat.ServeHTTP(w, r)
		})
		b.mux = m
	})
}

func (b *Batch) serve(w http.ResponseWriter, r *http.Request) {
	if b.initErr != nil {
		oaiError(w, 500, "server_error", "", "the fake cannot keep files: "+b.initErr.Error())
		return
	}
	if auth := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "); b.Token != "" && auth != b.Token {
		w.Header().Set("Content-Type", "application/json")
		oaiError(w, 401, "invalid_request_error", "invalid_api_key", "Incorrect API key provided: "+auth+". You can find your API key at https://platform.openai.com/account/api-keys.")
		return
	}
	if _, pattern := b.mux.Handler(r); pattern == "" {
		w.Header().Set("Content-Type", "application/json")
		oaiError(w, 404, "invalid_request_error", "", "Invalid URL ("+r.Method+" "+r.URL.Path+")")
		return
	}
	b.mux.ServeHTTP(w, r)
}

func (b *Batch) id(prefix string) string {
	return fmt.Sprintf("%s%024x", prefix, b.seq.Add(1))
}

func (b *Batch) steps() int { return max(1, b.Steps) }

// maxFileBytes is the largest upload taken (0: no limit).
func (b *Batch) maxFileBytes() int64 { return limitOr(b.MaxFileBytes, OpenAIMaxFileBytes) }

// maxRequests is the most lines a batch takes (0: no limit).
func (b *Batch) maxRequests() int { return int(limitOr(int64(b.MaxRequests), OpenAIMaxRequests)) }

// limitOr is a limit field's value: 0 is OpenAI's, < 0 none (0).
func limitOr(set, openAI int64) int64 {
	switch {
	case set == 0:
		return openAI
	case set < 0:
		return 0
	}
	return set
}

// writeJSON answers v as JSON with the status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// invalid answers OpenAI's 400 (or status) invalid_request_error.
func invalid(w http.ResponseWriter, status int, param, msg string) {
	var p any
	if param != "" {
		p = param
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": p, "code": nil}})
}

// drain reads what is left of a refused request's body, so that a client
// still streaming it reads the answer rather than a broken pipe.
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, r) }
