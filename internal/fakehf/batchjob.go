package fakehf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// batchJob is one batch: its object's fields, where it is in its input, and
// the output and error files it is writing. Its mu guards all of it.
type batchJob struct {
	mu                sync.Mutex
	id, endpoint      string
	window            string
	metadata          json.RawMessage
	input             *batchFile
	created           time.Time
	polls, tick       int
	status            string
	at                map[string]time.Time // when it entered each status
	total, tokens     int
	model             string
	fail              []batchError // why it fails at the end of validating
	processed         int
	completed, failed int
	in                *os.File
	rd                *bufio.Reader
	out, errs         lineFile
	outID, errID      string
	reqSeq            int
	ended             time.Time
	endedOK           bool
}

// lineFile is an output or error file being written.
type lineFile struct {
	f *os.File
	w *bufio.Writer
	n int
}

func (j *batchJob) isEnded() bool { return j.endedOK }

// create is POST /batches: it validates the input file at once (the
// outcome is shown at the end of validating, as OpenAI shows it) and
// decides the enqueued-token limit against the batches not ended now.
func (b *Batch) create(w http.ResponseWriter, r *http.Request) {
	b.creates.Add(1)
	var req struct {
		InputFileID      string          `json:"input_file_id"`
		Endpoint         string          `json:"endpoint"`
		CompletionWindow string          `json:"completion_window"`
		Metadata         json.RawMessage `json:"metadata"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		invalid(w, 400, "", "We could not parse the JSON body of your request.")
		return
	}
	f := b.file(req.InputFileID)
	switch {
	case req.InputFileID == "":
		invalid(w, 400, "input_file_id", "Missing required parameter: 'input_file_id'.")
		return
	case req.Endpoint != "/v1/chat/completions":
		invalid(w, 400, "endpoint", "Invalid value for 'endpoint': '"+req.Endpoint+"'. The fake serves '/v1/chat/completions' only.")
		return
	case req.CompletionWindow != "24h":
		invalid(w, 400, "completion_window", "Invalid value for 'completion_window': '"+req.CompletionWindow+"'. Supported values are: '24h'.")
		return
	case f == nil:
		invalid(w, 400, "input_file_id", "Cannot find file "+req.InputFileID+", or project does not have access to it.")
		return
	case f.Purpose != "batch":
		invalid(w, 400, "input_file_id", "The file "+req.InputFileID+" was uploaded with purpose '"+f.Purpose+"'; a batch's input file must have purpose 'batch'.")
		return
	}
	s, err := b.scan(f, req.Endpoint)
	if err != nil {
		oaiError(w, 500, "server_error", "", "The server had an error while reading the input file.")
		return
	}
	j := &batchJob{endpoint: req.Endpoint, window: req.CompletionWindow, metadata: req.Metadata, input: f,
		created: time.Now(), status: "validating", at: map[string]time.Time{}, total: s.lines,
		tokens: s.tokens, model: s.model, fail: s.errs}
	j.mu.Lock()
	defer j.mu.Unlock()
	b.mu.Lock()
	if len(j.fail) == 0 {
		enq := b.enqueued(j.created)
		if b.TokenLimit > 0 && enq+j.tokens > b.TokenLimit {
			j.fail = []batchError{{Code: "token_limit_exceeded", Message: "Enqueued token limit reached for " + j.model +
				" in organization org-fake. Limit: " + commas(b.TokenLimit) + " enqueued tokens. Please try again once some in_progress batches have been completed."}}
		} else {
			b.peakEnqueued = max(b.peakEnqueued, enq+j.tokens)
		}
	}
	j.id = b.id("batch_")
	b.jobs[j.id] = j
	b.order = append(b.order, j)
	if b.StepTime > 0 {
		b.wg.Add(1)
		go b.run(j)
	}
	b.mu.Unlock()
	writeJSON(w, 200, j.object())
}

// enqueued is the tokens of the batches accepted and not ended at now.
// The caller holds b.mu.
func (b *Batch) enqueued(now time.Time) int {
	n := 0
	for _, o := range b.order {
		o.mu.Lock()
		b.advance(o, now)
		if !o.isEnded() && len(o.fail) == 0 {
			n += o.tokens
		}
		o.mu.Unlock()
	}
	return n
}

func (b *Batch) job(w http.ResponseWriter, r *http.Request) *batchJob {
	id := r.PathValue("id")
	b.mu.Lock()
	j := b.jobs[id]
	b.mu.Unlock()
	if j == nil {
		invalid(w, 404, "", "No batch found with id '"+id+"'.")
	}
	return j
}

// get is GET /batches/{id}: a poll, one step on the poll clock.
func (b *Batch) get(w http.ResponseWriter, r *http.Request) {
	b.polls.Add(1)
	j := b.job(w, r)
	if j == nil {
		return
	}
	j.mu.Lock()
	j.polls++
	b.advance(j, time.Now())
	o := j.object()
	j.mu.Unlock()
	writeJSON(w, 200, o)
}

// list is GET /batches: a page of the batches, newest first, as OpenAI
// pages it: at most limit (default 20, 1 to 100, else a 400 naming
// limit), starting after the batch id after (none: the newest), with the
// page's first_id and last_id and has_more when older batches follow. An
// after that names no batch is a 404, as a GET of it is: a client only
// ever sends the last id of a page it was given.
func (b *Batch) list(w http.ResponseWriter, r *http.Request) {
	limit, ok := listLimit(w, r.URL.Query())
	if !ok {
		return
	}
	b.mu.Lock()
	jobs := make([]*batchJob, 0, len(b.order))
	for i := len(b.order) - 1; i >= 0; i-- {
		jobs = append(jobs, b.order[i])
	}
	b.mu.Unlock()
	if after := r.URL.Query().Get("after"); after != "" {
		i := slices.IndexFunc(jobs, func(j *batchJob) bool { return j.id == after })
		if i < 0 {
			invalid(w, 404, "after", "No batch found with id '"+after+"'.")
			return
		}
		jobs = jobs[i+1:]
	}
	more := len(jobs) > limit
	jobs = jobs[:min(limit, len(jobs))]
	data := make([]any, 0, len(jobs))
	now := time.Now()
	for _, j := range jobs {
		j.mu.Lock()
		b.advance(j, now)
		data = append(data, j.object())
		j.mu.Unlock()
	}
	out := map[string]any{"object": "list", "data": data, "first_id": nil, "last_id": nil, "has_more": more}
	if len(jobs) > 0 {
		out["first_id"], out["last_id"] = jobs[0].id, jobs[len(jobs)-1].id
	}
	writeJSON(w, 200, out)
}

// listLimit is a list's limit query (20 when absent), or false when it
// answered the 400 OpenAI answers to one that is not an integer in 1..100.
func listLimit(w http.ResponseWriter, q url.Values) (int, bool) {
	s := q.Get("limit")
	if s == "" {
		return 20, true
	}
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		oaiParamError(w, 400, "invalid_request_error", "invalid_type", "limit", "Invalid 'limit': expected an integer, but got a string instead.")
	case n < 1:
		oaiParamError(w, 400, "invalid_request_error", "integer_below_min_value", "limit", "Invalid 'limit': integer below minimum value. Expected a value >= 1, but got "+s+" instead.")
	case n > 100:
		oaiParamError(w, 400, "invalid_request_error", "integer_above_max_value", "limit", "Invalid 'limit': integer above maximum value. Expected a value <= 100, but got "+s+" instead.")
	default:
		return n, true
	}
	return 0, false
}

// cancel is POST /batches/{id}/cancel: cancelling now, cancelled a step
// later, with the lines answered so far kept. A batch already ended is a
// 409, as OpenAI answers it.
func (b *Batch) cancel(w http.ResponseWriter, r *http.Request) {
	b.cancels.Add(1)
	j := b.job(w, r)
	if j == nil {
		return
	}
	j.mu.Lock()
	b.advance(j, time.Now())
	if j.isEnded() {
		st := j.status
		j.mu.Unlock()
		invalid(w, 409, "", "Cannot cancel a batch with status '"+st+"'.")
		return
	}
	if j.status != "cancelling" {
		j.enter("cancelling", time.Now())
	}
	o := j.object()
	j.mu.Unlock()
	writeJSON(w, 200, o)
}

// advance brings j up to its polls (each poll a step). With StepTime it
// does nothing: j's worker (run) moves it on the clock, so that a poll
// never waits on the work. The caller holds j.mu.
func (b *Batch) advance(j *batchJob, _ time.Time) {
	if b.StepTime > 0 {
		return
	}
	for j.tick < j.polls && !j.isEnded() {
		j.tick++
		b.step(j)
	}
}

// run is j's worker with StepTime: a step at each StepTime from j's
// creation (late if the machine is busy; the timestamps are when it ran),
// until j ends or b is closed.
func (b *Batch) run(j *batchJob) {
	defer b.wg.Done()
	for {
		j.mu.Lock()
		next, ended := j.created.Add(time.Duration(j.tick+1)*b.StepTime), j.isEnded()
		j.mu.Unlock()
		if ended {
			return
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-b.done:
			t.Stop()
			return
		case <-t.C:
		}
		j.mu.Lock()
		j.tick++
		b.step(j)
		j.mu.Unlock()
	}
}

// step moves j one step on: validating for Steps, in_progress for Steps
// (answering lines), finalizing for Steps, then completed; or failed at the
// end of validating, expired at the end of in_progress if lines are left
// (ExpireAfter), cancelled a step after cancelling.
func (b *Batch) step(j *batchJob) {
	s, t, now := b.steps(), j.tick, time.Now()
	switch j.status {
	case "validating":
		if t < s {
			return
		}
		if len(j.fail) > 0 {
			b.finish(j, "failed", now)
			return
		}
		j.enter("in_progress", now)
		b.work(j, t-s, now)
	case "in_progress":
		if t < 2*s {
			b.work(j, t-s, now)
			return
		}
		b.work(j, s, now)
		switch {
		case j.status == "cancelling":
		case j.processed < j.total:
			b.finish(j, "expired", now)
		default:
			j.enter("finalizing", now)
		}
	case "finalizing":
		if t >= 3*s {
			b.finish(j, "completed", now)
		}
	case "cancelling":
		b.finish(j, "cancelled", now)
	}
}

// work answers lines up to in_progress step i's share, ExpireAfter at most;
// CancelAfter lines in, the provider cancels.
func (b *Batch) work(j *batchJob, i int, now time.Time) {
	s := b.steps()
	target := j.total * min(i+1, s+1) / (s + 1)
	if b.ExpireAfter > 0 {
		target = min(target, b.ExpireAfter)
	}
	for j.status == "in_progress" && j.processed < target {
		if b.CancelAfter > 0 && j.processed >= b.CancelAfter {
			break
		}
		if err := b.answerNext(j); err != nil {
			j.fail = []batchError{{Code: "server_error", Message: "The fake could not read the input file: " + err.Error()}}
			b.finish(j, "failed", now)
			return
		}
		if b.StepTime > 0 && j.processed%64 == 0 {
			// The worker lets polls and cancels in between lines; a
			// cancel stops it (the status is no longer in_progress).
			j.mu.Unlock()
			j.mu.Lock()
		}
	}
	if j.status == "in_progress" && b.CancelAfter > 0 && j.processed >= b.CancelAfter && j.processed < j.total {
		j.enter("cancelling", now)
	}
}

// nextLine is the next non-empty line of j's input (io.EOF at its end).
func (j *batchJob) nextLine() ([]byte, error) {
	if j.rd == nil {
		f, err := os.Open(j.input.path)
		if err != nil {
			return nil, err
		}
		j.in, j.rd = f, bufio.NewReaderSize(f, 64<<10)
	}
	for {
		raw, err := j.rd.ReadBytes('\n')
		if len(bytes.TrimSpace(raw)) > 0 {
			return raw, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// answerNext answers j's next line into its output or error file.
func (b *Batch) answerNext(j *batchJob) error {
	raw, err := j.nextLine()
	if err != nil {
		return err
	}
	var l requestLine
	if err := json.Unmarshal(raw, &l); err != nil {
		return err // validated at create: the file changed under it
	}
	line, isErr := b.answer(j, l)
	j.processed++
	b.lines.Add(1)
	dst := &j.out
	if isErr {
		dst, j.failed = &j.errs, j.failed+1
	} else {
		j.completed++
	}
	return b.writeLine(dst, "output", line)
}

func (b *Batch) writeLine(dst *lineFile, kind string, line []byte) error {
	if dst.f == nil {
		f, err := b.newOutput(kind)
		if err != nil {
			return err
		}
		dst.f, dst.w = f, bufio.NewWriterSize(f, 64<<10)
	}
	dst.n++
	_, _ = dst.w.Write(line)
	return dst.w.WriteByte('\n')
}

// batchOutLine is a line of an output or error file (batch_request_output).
type batchOutLine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response json.RawMessage `json:"response"` // nil: null
	Error    *batchLineErr   `json:"error"`
}

type batchLineErr struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// answer is l's output line, and whether it belongs in the error file (a
// response that is not 2xx). Garble's line goes to the output file as is.
func (b *Batch) answer(j *batchJob, l requestLine) ([]byte, bool) {
	if b.Garble != nil {
		if raw, ok := b.Garble(l.CustomID); ok {
			return raw, false
		}
	}
	j.reqSeq++
	n := strconv.Itoa(j.reqSeq)
	status, body := 0, []byte(nil)
	if b.FailLine != nil {
		if st, code, ok := b.FailLine(l.CustomID, l.Body); ok {
			status, body = st, failBody(st, code)
		}
	}
	if status == 0 {
		status, body = b.liveAnswer(l.Body)
	}
	// Written by hand rather than marshalled: body is JSON already, and
	// checking it again cost a quarter of a line's time.
	suffix := j.id[len("batch_"):] + "_" + n
	line := make([]byte, 0, len(body)+len(l.CustomID)+160)
	line = append(line, `{"id":"batch_req_`+suffix+`","custom_id":`...)
	line = appendJSONString(line, l.CustomID)
	line = append(line, `,"response":{"status_code":`+strconv.Itoa(status)+`,"request_id":"req_`+suffix+`","body":`...)
	line = append(line, body...)
	line = append(line, `},"error":null}`...)
	return line, status/100 != 2
}

func appendJSONString(dst []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(dst, q...)
}

// liveAnswer is what the Chat fake answers body live (a body that is not
// JSON, as a hostile Raw may answer, is embedded as a JSON string).
func (b *Batch) liveAnswer(body []byte) (int, []byte) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	b.line.ServeHTTP(rec, req)
	out := bytes.TrimSpace(rec.Body.Bytes())
	// The Chat's JSON answers are marshalled; only a Raw body or a
	// text/plain refusal needs checking.
	if b.line.Raw != nil || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
		if !json.Valid(out) {
			out, _ = json.Marshal(string(out))
		}
	}
	return rec.Code, out
}

// failBody is OpenAI's error body for a line FailLine fails: for
// context_length_exceeded the real message and param.
func failBody(status int, code string) []byte {
	typ, msg, param := "invalid_request_error", "Invalid request.", any(nil)
	switch {
	case code == "context_length_exceeded":
		msg, param = "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages.", "messages"
	case status == 429:
		typ, msg = "requests", "Rate limit reached for requests."
	case status >= 500:
		typ, msg = "server_error", "The server had an error while processing your request. Sorry about that!"
	}
	var c any
	if code != "" {
		c = code
	}
	out, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": param, "code": c}})
	return out
}

func (j *batchJob) enter(status string, now time.Time) {
	j.status = status
	j.at[status] = now
}

// finish ends j: the lines it never answered marked (MarkUnanswered, for
// expired and cancelled), its output and error files published if they
// hold a line (OpenAI leaves output_file_id null when no line succeeded).
func (b *Batch) finish(j *batchJob, status string, now time.Time) {
	if b.MarkUnanswered && (status == "expired" || status == "cancelled") {
		b.markUnanswered(j, status)
	}
	j.outID = b.publish(j, &j.out, "output")
	j.errID = b.publish(j, &j.errs, "error")
	j.closeFiles()
	j.enter(status, now)
	j.ended, j.endedOK = now, true
}

// markUnanswered writes an error line for each line j never reached.
func (b *Batch) markUnanswered(j *batchJob, status string) {
	code, msg := "batch_expired", "This request could not be executed before the completion window expired."
	if status == "cancelled" {
		code, msg = "batch_cancelled", "This request was not executed because the batch was cancelled."
	}
	for {
		raw, err := j.nextLine()
		if err != nil {
			return
		}
		var l requestLine
		_ = json.Unmarshal(raw, &l)
		j.reqSeq++
		line, _ := json.Marshal(batchOutLine{ID: "batch_req_" + j.id[len("batch_"):] + "_" + strconv.Itoa(j.reqSeq),
			CustomID: l.CustomID, Error: &batchLineErr{Code: code, Message: msg}})
		if b.writeLine(&j.errs, "error", line) != nil {
			return
		}
	}
}

// publish closes an output or error file and makes it a file of purpose
// batch_output (its id; "" if it holds no line).
func (b *Batch) publish(j *batchJob, lf *lineFile, kind string) string {
	if lf.f == nil || lf.n == 0 {
		return ""
	}
	_ = lf.w.Flush()
	st, err := lf.f.Stat()
	if err != nil {
		return ""
	}
	f := &batchFile{ID: b.id("file-"), Filename: j.id + "_" + kind + ".jsonl", Purpose: "batch_output",
		Bytes: st.Size(), Created: time.Now(), path: lf.f.Name()}
	b.addFile(f)
	return f.ID
}

func (j *batchJob) closeFiles() {
	for _, lf := range []*lineFile{&j.out, &j.errs} {
		if lf.f != nil {
			_ = lf.w.Flush()
			_ = lf.f.Close()
			lf.f = nil
		}
	}
	if j.in != nil {
		_ = j.in.Close()
		j.in, j.rd = nil, nil
	}
}

// object is j as batch.py has it.
func (j *batchJob) object() map[string]any {
	ts := func(status string) any {
		if t, ok := j.at[status]; ok {
			return t.Unix()
		}
		return nil
	}
	total := j.total
	if j.status == "validating" || j.status == "failed" {
		total = 0
	}
	o := map[string]any{"id": j.id, "object": "batch", "endpoint": j.endpoint, "errors": nil,
		"input_file_id": j.input.ID, "completion_window": j.window, "status": j.status,
		"output_file_id": nullable(j.outID), "error_file_id": nullable(j.errID),
		"created_at": j.created.Unix(), "expires_at": j.created.Add(24 * time.Hour).Unix(),
		"in_progress_at": ts("in_progress"), "finalizing_at": ts("finalizing"), "completed_at": ts("completed"),
		"failed_at": ts("failed"), "expired_at": ts("expired"), "cancelling_at": ts("cancelling"), "cancelled_at": ts("cancelled"),
		"request_counts": map[string]int{"total": total, "completed": j.completed, "failed": j.failed},
		"metadata":       nil, "model": j.model}
	if len(j.metadata) > 0 {
		o["metadata"] = j.metadata
	}
	if j.status == "failed" && len(j.fail) > 0 {
		o["errors"] = map[string]any{"object": "list", "data": j.fail}
	}
	return o
}

func (j *batchJob) info() BatchInfo {
	in := BatchInfo{ID: j.id, Status: j.status, Lines: j.total, Completed: j.completed, Failed: j.failed,
		InputFileID: j.input.ID, OutputFileID: j.outID, ErrorFileID: j.errID, Tokens: j.tokens,
		CreatedAt: j.created, EndedAt: j.ended}
	if j.status == "failed" {
		for _, e := range j.fail {
			in.Errors = append(in.Errors, e.Code)
		}
	}
	return in
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func itoa(n int) string { return strconv.Itoa(n) }

// commas writes n as OpenAI writes limits: 2,000,000.
func commas(n int) string {
	s := strconv.Itoa(n)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
