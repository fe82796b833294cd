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
	"testing"
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
