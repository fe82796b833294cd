package fakehf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// batchClient talks to a fake Batch API with a plain http.Client, as a
// client would on the wire.
type batchClient struct {
	t     *testing.T
	root  string
	token string
}

func startBatchT(t *testing.T, b *Batch) (*httptest.Server, *batchClient) {
	t.Helper()
	if b.Dir == "" {
		b.Dir = t.TempDir()
	}
	srv := StartBatch(b)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = b.Close() }) // before the Dir goes
	return srv, &batchClient{t: t, root: srv.URL + "/v1", token: b.Token}
}

func (c *batchClient) do(method, path, ctype string, body io.Reader) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.root+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// upload sends jsonl as OpenAI's SDK does: multipart, purpose then file.
func (c *batchClient) upload(name, purpose string, jsonl []byte) (int, map[string]any) {
	c.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("purpose", purpose)
	fw, _ := mw.CreateFormFile("file", name)
	_, _ = fw.Write(jsonl)
	_ = mw.Close()
	st, body := c.do("POST", "/files", mw.FormDataContentType(), &buf)
	var obj map[string]any
	_ = json.Unmarshal(body, &obj)
	return st, obj
}

func (c *batchClient) create(fileID string) (int, batchObj) {
	c.t.Helper()
	st, body := c.do("POST", "/batches", "application/json", strings.NewReader(
		`{"input_file_id":"`+fileID+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`))
	return st, decodeBatch(c.t, st, body)
}

func (c *batchClient) get(id string) batchObj {
	c.t.Helper()
	st, body := c.do("GET", "/batches/"+id, "", nil)
	return decodeBatch(c.t, st, body)
}

func (c *batchClient) content(fileID string) []map[string]any {
	c.t.Helper()
	st, body := c.do("GET", "/files/"+fileID+"/content", "", nil)
	if st != 200 {
		c.t.Fatalf("content %s: %d %s", fileID, st, body)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			c.t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	return lines
}

// submit uploads jsonl and creates its batch.
func (c *batchClient) submit(jsonl []byte) batchObj {
	c.t.Helper()
	st, f := c.upload("in.jsonl", "batch", jsonl)
	if st != 200 {
		c.t.Fatalf("upload: %d %v", st, f)
	}
	st, b := c.create(f["id"].(string))
	if st != 200 {
		c.t.Fatalf("create: %d", st)
	}
	return b
}

// batchObj is the batch object as openai-python reads it.
type batchObj struct {
	ID            string  `json:"id"`
	Object        string  `json:"object"`
	Status        string  `json:"status"`
	OutputFileID  *string `json:"output_file_id"`
	ErrorFileID   *string `json:"error_file_id"`
	InputFileID   string  `json:"input_file_id"`
	RequestCounts struct {
		Total, Completed, Failed int
	} `json:"request_counts"`
	Errors *struct {
		Object string `json:"object"`
		Data   []struct {
			Code, Message string
			Line          *int
		} `json:"data"`
	} `json:"errors"`
	raw map[string]any
}

func decodeBatch(t *testing.T, st int, body []byte) batchObj {
	t.Helper()
	if st != 200 {
		t.Fatalf("batch answer %d: %s", st, body)
	}
	var b batchObj
	if err := json.Unmarshal(body, &b); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	_ = json.Unmarshal(body, &b.raw)
	return b
}

// requests is n request lines r0..r(n-1) with the texts text(i).
func requests(n int, text func(i int) string) []byte {
	var buf bytes.Buffer
	for i := range n {
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "messages": []any{
			map[string]any{"role": "user", "content": text(i)}}})
		fmt.Fprintf(&buf, `{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", i, body)
	}
	return buf.Bytes()
}

func plainText(i int) string { return fmt.Sprintf("text number %d is great", i) }

// The statuses, request_counts and files of a clean batch, poll by poll.
func TestBatchCleanRun(t *testing.T) {
	b := &Batch{Steps: 2}
	_, c := startBatchT(t, b)
	created := c.submit(requests(10, plainText))
	if created.Status != "validating" || created.Object != "batch" || created.RequestCounts.Total != 0 {
		t.Fatalf("created: %+v", created)
	}
	var seen []string
	var completed []int
	var last batchObj
	for range 6 {
		last = c.get(created.ID)
		seen = append(seen, last.Status)
		completed = append(completed, last.RequestCounts.Completed)
	}
	want := []string{"validating", "in_progress", "in_progress", "finalizing", "finalizing", "completed"}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", seen, want)
	}
	// After in_progress step i, (i+1)/(Steps+1) of the lines: 3, 6, then all.
	if fmt.Sprint(completed) != "[0 3 6 10 10 10]" {
		t.Fatalf("completed counts %v", completed)
	}
	if last.RequestCounts.Total != 10 || last.RequestCounts.Failed != 0 || last.ErrorFileID != nil || last.OutputFileID == nil {
		t.Fatalf("completed batch: %+v", last)
	}
	for _, k := range []string{"in_progress_at", "finalizing_at", "completed_at", "expires_at", "created_at"} {
		if last.raw[k] == nil {
			t.Errorf("%s is null", k)
		}
	}
	lines := c.content(*last.OutputFileID)
	if len(lines) != 10 {
		t.Fatalf("%d output lines", len(lines))
	}
	for i, l := range lines {
		resp := l["response"].(map[string]any)
		content := resp["body"].(map[string]any)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]
		if l["custom_id"] != fmt.Sprintf("r%d", i) || resp["status_code"] != 200.0 || content != "Positive." || l["error"] != nil {
			t.Fatalf("line %d: %v", i, l)
		}
	}
	cnt := b.Counts()
	if cnt.Uploads != 1 || cnt.Creates != 1 || cnt.Polls != 6 || cnt.Downloads != 1 || cnt.Lines != 10 {
		t.Fatalf("counts %+v", cnt)
	}
	snap := b.Snapshot()
	if len(snap) != 1 || snap[0].Status != "completed" || snap[0].Completed != 10 || snap[0].EndedAt.IsZero() {
		t.Fatalf("snapshot %+v", snap)
	}
}

// pollUntilEnded polls until the batch ends (at most n polls), returning
// the statuses seen.
func (c *batchClient) pollUntilEnded(id string, n int) (batchObj, []string) {
	c.t.Helper()
	var seen []string
	for range n {
		b := c.get(id)
		seen = append(seen, b.Status)
		switch b.Status {
		case "completed", "failed", "expired", "cancelled":
			return b, seen
		}
	}
	c.t.Fatalf("batch %s not ended after %d polls: %v", id, n, seen)
	return batchObj{}, nil
}

// Lines FailLine fails, and lines the Chat itself refuses (#context#), are
// in the error file in OpenAI's shape, counted as failed; the others in the
// output file.
func TestBatchErrorFile(t *testing.T) {
	b := &Batch{FailLine: func(id string, body []byte) (int, string, bool) {
		return 400, "context_length_exceeded", id == "r1"
	}}
	_, c := startBatchT(t, b)
	text := func(i int) string {
		if i == 3 {
			return "too long #context#"
		}
		return plainText(i)
	}
	end, _ := c.pollUntilEnded(c.submit(requests(5, text)).ID, 10)
	if end.Status != "completed" || end.RequestCounts != (struct{ Total, Completed, Failed int }{5, 3, 2}) {
		t.Fatalf("ended %+v", end)
	}
	if end.OutputFileID == nil || end.ErrorFileID == nil {
		t.Fatalf("files: %v %v", end.OutputFileID, end.ErrorFileID)
	}
	errs := c.content(*end.ErrorFileID)
	if len(errs) != 2 || errs[0]["custom_id"] != "r1" || errs[1]["custom_id"] != "r3" {
		t.Fatalf("error lines %v", errs)
	}
	for _, l := range errs {
		resp := l["response"].(map[string]any)
		e := resp["body"].(map[string]any)["error"].(map[string]any)
		if resp["status_code"] != 400.0 || e["code"] != "context_length_exceeded" || e["type"] != "invalid_request_error" || l["error"] != nil {
			t.Fatalf("error line %v", l)
		}
		if !strings.Contains(e["message"].(string), "maximum context length") {
			t.Fatalf("message %v", e["message"])
		}
		if !strings.HasPrefix(l["id"].(string), "batch_req_") || resp["request_id"] == "" {
			t.Fatalf("ids %v", l)
		}
	}
	if out := c.content(*end.OutputFileID); len(out) != 3 || out[0]["custom_id"] != "r0" || out[2]["custom_id"] != "r4" {
		t.Fatalf("output lines %v", out)
	}
}

// A batch where no line succeeded has no output file, as OpenAI leaves it.
func TestBatchAllFailedHasNoOutputFile(t *testing.T) {
	_, c := startBatchT(t, &Batch{FailLine: func(string, []byte) (int, string, bool) { return 500, "", true }})
	end, _ := c.pollUntilEnded(c.submit(requests(2, plainText)).ID, 10)
	if end.Status != "completed" || end.OutputFileID != nil || end.ErrorFileID == nil || end.RequestCounts.Failed != 2 {
		t.Fatalf("ended %+v", end)
	}
	l := c.content(*end.ErrorFileID)[0]["response"].(map[string]any)
	if l["status_code"] != 500.0 || l["body"].(map[string]any)["error"].(map[string]any)["type"] != "server_error" {
		t.Fatalf("line %v", l)
	}
}

// Structured outputs in a line are answered as live: {"label": ...}.
func TestBatchLineAnsweredAsLive(t *testing.T) {
	_, c := startBatchT(t, &Batch{})
	body := `{"model":"m","messages":[{"role":"user","content":"a bad day"}],"response_format":{"type":"json_schema","json_schema":{"name":"l","strict":true,"schema":{"type":"object","properties":{"label":{"enum":["positive","negative"]}}}}}}`
	end, _ := c.pollUntilEnded(c.submit([]byte(`{"custom_id":"x-1","method":"POST","url":"/v1/chat/completions","body":`+body+"}\n")).ID, 10)
	l := c.content(*end.OutputFileID)[0]
	content := l["response"].(map[string]any)["body"].(map[string]any)["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)["content"]
	if content != `{"label":"negative"}` {
		t.Fatalf("content %v", content)
	}
}

// ExpireAfter: a batch answers that many lines, then ends expired with
// them in its output file and the rest absent (or, MarkUnanswered, in the
// error file as batch_expired, not counted as failed).
func TestBatchExpiryKeepsPartialOutput(t *testing.T) {
	for _, mark := range []bool{false, true} {
		t.Run(fmt.Sprint("mark=", mark), func(t *testing.T) {
			_, c := startBatchT(t, &Batch{ExpireAfter: 4, MarkUnanswered: mark})
			end, seen := c.pollUntilEnded(c.submit(requests(10, plainText)).ID, 10)
			if fmt.Sprint(seen) != "[in_progress expired]" || end.RequestCounts != (struct{ Total, Completed, Failed int }{10, 4, 0}) {
				t.Fatalf("%v %+v", seen, end)
			}
			if end.raw["expired_at"] == nil || end.raw["finalizing_at"] != nil {
				t.Fatalf("timestamps %v", end.raw)
			}
			out := c.content(*end.OutputFileID)
			if len(out) != 4 || out[3]["custom_id"] != "r3" {
				t.Fatalf("output %v", out)
			}
			if !mark {
				if end.ErrorFileID != nil {
					t.Fatalf("error file %v", *end.ErrorFileID)
				}
				return
			}
			errs := c.content(*end.ErrorFileID)
			if len(errs) != 6 || errs[0]["custom_id"] != "r4" || errs[0]["response"] != nil ||
				errs[0]["error"].(map[string]any)["code"] != "batch_expired" {
				t.Fatalf("error lines %v", errs)
			}
		})
	}
}

// CancelAfter: the provider cancels the batch once it has answered that
// many lines (here in the first in_progress step, which would answer 4):
// cancelling, then cancelled a step later, with those lines kept.
func TestBatchProviderCancel(t *testing.T) {
	_, c := startBatchT(t, &Batch{CancelAfter: 3, MarkUnanswered: true})
	end, seen := c.pollUntilEnded(c.submit(requests(8, plainText)).ID, 10)
	if fmt.Sprint(seen) != "[cancelling cancelled]" || end.RequestCounts.Completed != 3 {
		t.Fatalf("%v %+v", seen, end)
	}
	if out := c.content(*end.OutputFileID); len(out) != 3 {
		t.Fatalf("output %v", out)
	}
	errs := c.content(*end.ErrorFileID)
	if len(errs) != 5 || errs[0]["error"].(map[string]any)["code"] != "batch_cancelled" {
		t.Fatalf("error lines %v", errs)
	}
}

// The cancel endpoint: cancelling at once, cancelled at the next poll,
// with the lines answered so far kept; an ended batch's cancel is a 409.
func TestBatchUserCancel(t *testing.T) {
	b := &Batch{Steps: 3}
	_, c := startBatchT(t, b)
	id := c.submit(requests(8, plainText)).ID
	for range 3 { // validating for 2 polls, then in_progress step 0: 8*1/4 lines
		c.get(id)
	}
	st, body := c.do("POST", "/batches/"+id+"/cancel", "", nil)
	cancelling := decodeBatch(t, st, body)
	if cancelling.Status != "cancelling" || cancelling.raw["cancelling_at"] == nil || cancelling.RequestCounts.Completed != 2 {
		t.Fatalf("cancel answered %+v", cancelling)
	}
	end := c.get(id)
	if end.Status != "cancelled" || end.raw["cancelled_at"] == nil || end.OutputFileID == nil || end.RequestCounts.Completed != 2 {
		t.Fatalf("after cancel %+v", end)
	}
	if out := c.content(*end.OutputFileID); len(out) != 2 {
		t.Fatalf("output %v", out)
	}
	if st, _ := c.do("POST", "/batches/"+id+"/cancel", "", nil); st != 409 {
		t.Fatalf("cancel of a cancelled batch: %d", st)
	}
	if n := b.Counts().Cancels; n != 2 {
		t.Fatalf("cancels %d", n)
	}
}

// TokenLimit: a batch created while an earlier one holds the enqueued
// tokens fails with token_limit_exceeded; once the earlier one has
// finished, the same file goes through.
func TestBatchTokenLimit(t *testing.T) {
	in := requests(5, plainText)
	tokens := 0
	for _, l := range bytes.Split(bytes.TrimSpace(in), []byte("\n")) {
		var r requestLine
		_ = json.Unmarshal(l, &r)
		tokens += BatchTokens(r.Body)
	}
	b := &Batch{TokenLimit: tokens + tokens/2}
	_, c := startBatchT(t, b)
	first := c.submit(in)
	st, f := c.upload("again.jsonl", "batch", in)
	if st != 200 {
		t.Fatal(st)
	}
	_, second := c.create(f["id"].(string))
	if second.Status != "validating" {
		t.Fatalf("refused batch answered %s at create", second.Status)
	}
	refused, _ := c.pollUntilEnded(second.ID, 5)
	if refused.Status != "failed" || refused.Errors == nil || refused.Errors.Object != "list" || len(refused.Errors.Data) != 1 ||
		refused.Errors.Data[0].Code != "token_limit_exceeded" || refused.raw["failed_at"] == nil || refused.OutputFileID != nil {
		t.Fatalf("refused %+v", refused)
	}
	if !strings.Contains(refused.Errors.Data[0].Message, "Enqueued token limit reached for gpt-4o-mini") || !strings.Contains(refused.Errors.Data[0].Message, commas(b.TokenLimit)) {
		t.Fatalf("message %q", refused.Errors.Data[0].Message)
	}
	if done, _ := c.pollUntilEnded(first.ID, 10); done.Status != "completed" {
		t.Fatalf("first %+v", done)
	}
	_, third := c.create(f["id"].(string))
	if done, _ := c.pollUntilEnded(third.ID, 10); done.Status != "completed" || done.RequestCounts.Completed != 5 {
		t.Fatalf("resubmitted %+v", done)
	}
	snap := b.Snapshot()
	if len(snap) != 3 || fmt.Sprint(snap[1].Errors) != "[token_limit_exceeded]" || snap[0].Tokens != tokens {
		t.Fatalf("snapshot %+v", snap)
	}
}

// MaxRequests and a malformed input fail validation, with errors naming the
// line; MaxFileBytes, a purpose other than batch for a batch, a file that
// is not .jsonl are refused as OpenAI refuses them.
func TestBatchValidation(t *testing.T) {
	b := &Batch{MaxRequests: 3, MaxFileBytes: 2000}
	_, c := startBatchT(t, b)
	end, _ := c.pollUntilEnded(c.submit(requests(4, plainText)).ID, 5)
	if end.Status != "failed" || end.Errors.Data[0].Code != "too_many_requests" {
		t.Fatalf("too many: %+v", end)
	}
	bad := append(requests(1, plainText), []byte("{not json\n"+string(requests(1, plainText)))...)
	end, _ = c.pollUntilEnded(c.submit(bad).ID, 5)
	codes := []string{}
	for _, e := range end.Errors.Data {
		codes = append(codes, fmt.Sprint(e.Code, "@", *e.Line))
	}
	if end.Status != "failed" || fmt.Sprint(codes) != "[invalid_json_line@2 duplicate_custom_id@3]" {
		t.Fatalf("malformed: %v %+v", codes, end)
	}
	if st, obj := c.upload("big.jsonl", "batch", requests(30, plainText)); st != 400 || obj["error"].(map[string]any)["message"] != "File is too large." {
		t.Fatalf("too large: %d %v", st, obj)
	}
	if st, _ := c.upload("in.txt", "batch", requests(1, plainText)); st != 400 {
		t.Fatalf(".txt: %d", st)
	}
	if st, _ := c.upload("in.jsonl", "nonsense", requests(1, plainText)); st != 400 {
		t.Fatalf("purpose: %d", st)
	}
	st, f := c.upload("in.jsonl", "user_data", requests(1, plainText))
	if st != 200 {
		t.Fatalf("user_data: %d", st)
	}
	if st, _ := c.do("POST", "/batches", "application/json", strings.NewReader(`{"input_file_id":"`+f["id"].(string)+`","endpoint":"/v1/chat/completions","completion_window":"24h"}`)); st != 400 {
		t.Fatalf("batch of a user_data file: %d", st)
	}
	if st, _ := c.do("POST", "/batches", "application/json", strings.NewReader(`{"input_file_id":"file-nope","endpoint":"/v1/chat/completions","completion_window":"24h"}`)); st != 400 {
		t.Fatalf("batch of no file: %d", st)
	}
	if st, _ := c.do("GET", "/batches/batch_nope", "", nil); st != 404 {
		t.Fatalf("unknown batch: %d", st)
	}
}

// Garble writes a line raw in the output file, counted as completed.
func TestBatchGarble(t *testing.T) {
	_, c := startBatchT(t, &Batch{Garble: func(id string) ([]byte, bool) {
		return []byte(`{"custom_id":"r99","response":`), id == "r1"
	}})
	end, _ := c.pollUntilEnded(c.submit(requests(3, plainText)).ID, 10)
	_, body := c.do("GET", "/files/"+*end.OutputFileID+"/content", "", nil)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if end.RequestCounts.Completed != 3 || len(lines) != 3 || lines[1] != `{"custom_id":"r99","response":` {
		t.Fatalf("%+v %q", end.RequestCounts, lines)
	}
}

// Token: every route needs the bearer token; the live route answers
// through Chat and is counted apart from the batch routes.
func TestBatchTokenAndLive(t *testing.T) {
	b := &Batch{Token: "sk-batch-secret"}
	srv, c := startBatchT(t, b)
	for _, p := range []string{"/v1/batches/x", "/v1/files/x/content", "/v1/chat/completions"} {
		resp, err := http.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("%s without token: %d", p, resp.StatusCode)
		}
	}
	end, _ := c.pollUntilEnded(c.submit(requests(1, plainText)).ID, 10)
	if end.Status != "completed" {
		t.Fatal(end.Status)
	}
	st, body := c.do("POST", "/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if st != 200 || !strings.Contains(string(body), "Positive.") {
		t.Fatalf("live: %d %s", st, body)
	}
	if cnt := b.Counts(); cnt.Live != 1 || cnt.Lines != 1 {
		t.Fatalf("counts %+v", cnt)
	}
}

// An upload streamed with no Content-Length (io.Pipe and a multipart
// writer, as a client that never holds the file does) is stored whole.
func TestBatchStreamedUpload(t *testing.T) {
	_, c := startBatchT(t, &Batch{})
	in := requests(2000, plainText)
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		_ = mw.WriteField("purpose", "batch")
		fw, _ := mw.CreateFormFile("file", "big.jsonl")
		for chunk := range bytes.Lines(in) {
			_, _ = fw.Write(chunk)
		}
		pw.CloseWithError(mw.Close())
	}()
	st, body := c.do("POST", "/files", mw.FormDataContentType(), pr)
	var f map[string]any
	_ = json.Unmarshal(body, &f)
	if st != 200 || f["bytes"] != float64(len(in)) || f["purpose"] != "batch" || f["object"] != "file" || f["filename"] != "big.jsonl" {
		t.Fatalf("%d %s", st, body)
	}
	_, b := c.create(f["id"].(string))
	end, _ := c.pollUntilEnded(b.ID, 10)
	if end.RequestCounts.Completed != 2000 || len(c.content(*end.OutputFileID)) != 2000 {
		t.Fatalf("%+v", end.RequestCounts)
	}
	if _, got := c.do("GET", "/files/"+f["id"].(string)+"/content", "", nil); !bytes.Equal(got, in) {
		t.Fatal("the input file's content is not what was uploaded")
	}
}

// With StepTime, polls do not move a batch: its worker does, a step each
// StepTime, so its processing time is at least 3*Steps*StepTime.
func TestBatchStepTime(t *testing.T) {
	b := &Batch{StepTime: time.Hour}
	_, c := startBatchT(t, b)
	id := c.submit(requests(3, plainText)).ID
	for range 5 {
		if st := c.get(id).Status; st != "validating" {
			t.Fatalf("a poll moved a StepTime batch: %s", st)
		}
	}
	b2 := &Batch{StepTime: time.Millisecond, Steps: 2}
	_, c2 := startBatchT(t, b2)
	id = c2.submit(requests(600, plainText)).ID
	var end batchObj
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if end = c2.get(id); end.Status == "completed" {
			break
		}
	}
	if end.Status != "completed" || end.RequestCounts.Completed != 600 || len(c2.content(*end.OutputFileID)) != 600 {
		t.Fatalf("%+v", end)
	}
	s := b2.Snapshot()[0]
	if d := s.EndedAt.Sub(s.CreatedAt); d < 6*time.Millisecond {
		t.Fatalf("processing time %v, under 3*Steps*StepTime", d)
	}
	if n := b2.Counts().Lines; n != 600 {
		t.Fatalf("lines %d", n)
	}
}

// A user cancel stops a StepTime batch's worker mid-work; the batch ends
// cancelled with what it answered.
func TestBatchStepTimeCancel(t *testing.T) {
	b := &Batch{StepTime: 20 * time.Millisecond}
	_, c := startBatchT(t, b)
	id := c.submit(requests(50, plainText)).ID
	st, body := c.do("POST", "/batches/"+id+"/cancel", "", nil)
	if got := decodeBatch(t, st, body); got.Status != "cancelling" {
		t.Fatalf("cancel: %s", got.Status)
	}
	var end batchObj
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if end = c.get(id); end.Status != "cancelling" {
			break
		}
	}
	if end.Status != "cancelled" || end.RequestCounts.Completed != 0 || end.OutputFileID != nil {
		t.Fatalf("%+v", end)
	}
}

// Concurrent clients, polls, cancels and snapshots (run with -race); the
// token limit holds across them: never more enqueued than the limit.
func TestBatchConcurrent(t *testing.T) {
	in := requests(20, plainText)
	per := 0
	for l := range bytes.Lines(in) {
		var r requestLine
		_ = json.Unmarshal(l, &r)
		per += BatchTokens(r.Body)
	}
	b := &Batch{Steps: 2, TokenLimit: 3 * per}
	_, c := startBatchT(t, b)
	var wg sync.WaitGroup
	results := make(chan string, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := c.submit(in).ID
			if g == 0 {
				c.do("POST", "/batches/"+id+"/cancel", "", nil)
			}
			end, _ := c.pollUntilEnded(id, 20)
			if end.OutputFileID != nil {
				c.content(*end.OutputFileID)
			}
			results <- end.Status
			_ = b.Snapshot()
			_ = b.Counts()
		}()
	}
	wg.Wait()
	close(results)
	ok := 0
	for st := range results {
		if st == "completed" || st == "cancelled" {
			ok++
		}
	}
	if cnt := b.Counts(); cnt.PeakEnqueued > int64(b.TokenLimit) || cnt.PeakEnqueued < int64(per) {
		t.Fatalf("peak enqueued %d, limit %d", cnt.PeakEnqueued, b.TokenLimit)
	}
	if ok < 1 || ok > 8 || b.Counts().Creates != 8 {
		t.Fatalf("ok %d counts %+v", ok, b.Counts())
	}
}

// The file object, the list of batches (newest first) and deleting a file.
func TestBatchListAndFiles(t *testing.T) {
	_, c := startBatchT(t, &Batch{})
	first := c.submit(requests(1, plainText))
	second := c.submit(requests(2, plainText))
	st, body := c.do("GET", "/batches", "", nil)
	var list struct {
		Object string
		Data   []batchObj
	}
	_ = json.Unmarshal(body, &list)
	if st != 200 || list.Object != "list" || len(list.Data) != 2 || list.Data[0].ID != second.ID || list.Data[1].ID != first.ID {
		t.Fatalf("%d %s", st, body)
	}
	st, body = c.do("GET", "/files/"+first.InputFileID, "", nil)
	if st != 200 || !strings.Contains(string(body), `"purpose":"batch"`) {
		t.Fatalf("file object: %d %s", st, body)
	}
	if st, body = c.do("DELETE", "/files/"+first.InputFileID, "", nil); st != 200 || !strings.Contains(string(body), `"deleted":true`) {
		t.Fatalf("delete: %d %s", st, body)
	}
	if st, _ = c.do("GET", "/files/"+first.InputFileID+"/content", "", nil); st != 404 {
		t.Fatalf("content of a deleted file: %d", st)
	}
	if end, _ := c.pollUntilEnded(first.ID, 10); end.Status != "completed" {
		t.Fatalf("a batch whose input was deleted: %s", end.Status)
	}
}

// The list pages as OpenAI's does: 20 a page unless limit says (1 to 100,
// else a 400 naming limit), newest first, after the id given, with the
// page's first_id and last_id and has_more while older batches follow.
func TestBatchListPages(t *testing.T) {
	_, c := startBatchT(t, &Batch{})
	st, f := c.upload("in.jsonl", "batch", requests(1, plainText))
	if st != 200 {
		t.Fatalf("upload: %d %v", st, f)
	}
	var ids []string // newest first
	for range 45 {
		st, b := c.create(f["id"].(string))
		if st != 200 {
			t.Fatalf("create: %d", st)
		}
		ids = append([]string{b.ID}, ids...)
	}
	type page struct {
		Object  string
		Data    []batchObj
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
		HasMore bool    `json:"has_more"`
	}
	list := func(query string) (int, page, string) {
		st, body := c.do("GET", "/batches"+query, "", nil)
		var p page
		_ = json.Unmarshal(body, &p)
		return st, p, string(body[:min(len(body), 300)])
	}
	// Walk the pages as a client does: after = the last id of the page.
	for _, c := range []struct {
		query string
		from  int
		n     int
		more  bool
	}{
		{"", 0, 20, true}, {"?after=" + ids[19], 20, 20, true}, {"?after=" + ids[39], 40, 5, false},
		{"?limit=100", 0, 45, false}, {"?limit=1&after=" + ids[43], 44, 1, false}, {"?limit=7&after=" + ids[2], 3, 7, true},
		{"?after=" + ids[44], 45, 0, false},
	} {
		st, p, body := list(c.query)
		if st != 200 || p.Object != "list" || len(p.Data) != c.n || p.HasMore != c.more {
			t.Fatalf("%s: %d, %d batches, has_more %v; want %d, %v: %s", c.query, st, len(p.Data), p.HasMore, c.n, c.more, body)
		}
		for i, b := range p.Data {
			if b.ID != ids[c.from+i] {
				t.Fatalf("%s: batch %d is %s, want %s (newest first)", c.query, i, b.ID, ids[c.from+i])
			}
		}
		if c.n == 0 && p.FirstID != nil {
			t.Fatalf("%s: an empty page has first_id: %s", c.query, body)
		}
		if c.n > 0 && (p.FirstID == nil || *p.FirstID != ids[c.from] || *p.LastID != ids[c.from+c.n-1]) {
			t.Fatalf("%s: first_id/last_id: %s", c.query, body)
		}
	}
	for q, code := range map[string]string{"?limit=0": "integer_below_min_value", "?limit=101": "integer_above_max_value", "?limit=ten": "invalid_type"} {
		st, body := c.do("GET", "/batches"+q, "", nil)
		var e struct {
			Error struct{ Message, Type, Param, Code string }
		}
		if err := json.Unmarshal(body, &e); err != nil || st != 400 || e.Error.Type != "invalid_request_error" || e.Error.Param != "limit" || e.Error.Code != code || !strings.Contains(e.Error.Message, "'limit'") {
			t.Errorf("%s: %d %s; want 400 %s on param limit", q, st, body, code)
		}
	}
	if st, body := c.do("GET", "/batches?after=batch_nope", "", nil); st != 404 {
		t.Errorf("after an unknown batch: %d %s", st, body)
	}
}

// OpenAI's limits are the fake's by default, so that a client that sends
// more than OpenAI takes is refused in every test: 50,000 requests a batch
// and 200 MB a file. MaxRequests < 0 lifts the first.
func TestBatchOpenAILimitsByDefault(t *testing.T) {
	_, c := startBatchT(t, &Batch{})
	in := requests(OpenAIMaxRequests+1, plainText)
	end, _ := c.pollUntilEnded(c.submit(in).ID, 5)
	if end.Status != "failed" || end.Errors == nil || end.Errors.Data[0].Code != "too_many_requests" || !strings.Contains(end.Errors.Data[0].Message, "maximum of 50000") {
		t.Fatalf("%d requests: %+v", OpenAIMaxRequests+1, end)
	}
	_, c = startBatchT(t, &Batch{MaxRequests: -1, Steps: 3})
	b := c.submit(in)
	for range 3 {
		b = c.get(b.ID)
	}
	if b.Status != "in_progress" || b.RequestCounts.Total != OpenAIMaxRequests+1 {
		t.Fatalf("MaxRequests -1: %+v", b)
	}

	// One byte over 200 MB, streamed: never held in memory here.
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		_ = mw.WriteField("purpose", "batch")
		fw, _ := mw.CreateFormFile("file", "big.jsonl")
		line := append(bytes.Repeat([]byte("x"), 999), '\n')
		for range OpenAIMaxFileBytes / len(line) {
			if _, err := fw.Write(line); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		_, _ = fw.Write([]byte("x"))
		pw.CloseWithError(mw.Close())
	}()
	st, body := c.do("POST", "/files", mw.FormDataContentType(), pr)
	if st != 400 || !strings.Contains(string(body), "File is too large.") {
		t.Fatalf("%d bytes: %d %s", OpenAIMaxFileBytes+1, st, body)
	}
}
