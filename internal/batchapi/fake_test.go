package batchapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
)

// The client against fakehf.Batch, the fake Batch API the runner is tested
// on: every route, and the shapes of each way a batch ends.

func startFake(t *testing.T, b *fakehf.Batch) *Client {
	t.Helper()
	b.Dir = t.TempDir()
	srv := fakehf.StartBatch(b)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { _ = b.Close() }) // before the Dir goes
	return &Client{HTTP: srv.Client(), Root: srv.URL + "/v1", Token: b.Token, Backoff: 1}
}

// input is n request lines, the texts text(i), through RequestWriter.
func input(t *testing.T, n int, text func(int) string) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	w := NewRequestWriter(&buf)
	for i := range n {
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o-mini", "messages": []any{map[string]any{"role": "user", "content": text(i)}}})
		if _, err := w.Write(CustomID(i), body); err != nil {
			t.Fatal(err)
		}
	}
	return &buf
}

func text(i int) string { return fmt.Sprintf("text number %d is great", i) }

// submit uploads and creates, then polls until the batch ends.
func submit(t *testing.T, c *Client, in *bytes.Buffer) Batch {
	t.Helper()
	ctx := context.Background()
	f, err := c.Upload(ctx, "rows.jsonl", in)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Create(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b.InputFileID != f.ID || b.Endpoint != EndpointChat || b.CompletionWindow != "24h" {
		t.Fatalf("created %+v", b)
	}
	return poll(t, c, b.ID)
}

func poll(t *testing.T, c *Client, id string) Batch {
	t.Helper()
	for range 50 {
		b, err := c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if b.Ended() {
			return b
		}
	}
	t.Fatalf("batch %s not ended after 50 polls", id)
	return Batch{}
}

// results reads a file through Content and ReadResults.
func results(t *testing.T, c *Client, fileID string) ([]Result, error) {
	t.Helper()
	if fileID == "" {
		return nil, nil
	}
	rc, err := c.Content(context.Background(), fileID)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out []Result
	err = ReadResults(rc, 0, func(_ int, r Result) error { out = append(out, r); return nil })
	return out, err
}

func TestFakeCleanRun(t *testing.T) {
	fb := &fakehf.Batch{Steps: 2, Token: "sk-fake-0123456789abcdefghij"}
	c := startFake(t, fb)
	end := submit(t, c, input(t, 25, text))
	if end.Status != StatusCompleted || end.Counts != (RequestCounts{25, 25, 0}) || end.OutputFileID == "" || end.ErrorFileID != "" {
		t.Fatalf("%+v", end)
	}
	out, err := results(t, c, end.OutputFileID)
	if err != nil || len(out) != 25 {
		t.Fatalf("%d results, %v", len(out), err)
	}
	for i, r := range out {
		var cc struct {
			Choices []struct {
				Message struct{ Content string } `json:"message"`
			} `json:"choices"`
		}
		if r.Index != i || !r.OK() || json.Unmarshal(r.Body, &cc) != nil || len(cc.Choices) != 1 || cc.Choices[0].Message.Content != "Positive." {
			t.Fatalf("line %d: %+v %s", i, r, r.Body)
		}
	}
	n := fb.Counts()
	if n.Uploads != 1 || n.Creates != 1 || n.Downloads != 1 || n.Lines != 25 {
		t.Fatalf("%+v", n)
	}
}

func TestFakeTokenRejectedNeverShown(t *testing.T) {
	fb := &fakehf.Batch{Token: "sk-right-0123456789abcdefghij"}
	c := startFake(t, fb)
	c.Token = "sk-wrong-0123456789abcdefghij"
	_, err := c.Upload(context.Background(), "rows.jsonl", input(t, 2, text))
	e, ok := AsError(err)
	if !ok || e.Status != 401 || e.Outcome() != outcome.UpstreamAuth || !e.Final() {
		t.Fatalf("%v", err)
	}
	if strings.Contains(err.Error(), "0123456789") {
		t.Fatalf("token shown: %v", err)
	}
}

func TestFakeErrorFileLines(t *testing.T) {
	fb := &fakehf.Batch{FailLine: func(id string, _ []byte) (int, string, bool) { return 400, "context_length_exceeded", id == "r1" }}
	c := startFake(t, fb)
	end := submit(t, c, input(t, 4, func(i int) string {
		if i == 3 {
			return "#500# " + text(i)
		}
		return text(i)
	}))
	if end.Status != StatusCompleted || end.Counts != (RequestCounts{4, 2, 2}) || end.ErrorFileID == "" {
		t.Fatalf("%+v", end)
	}
	errs, err := results(t, c, end.ErrorFileID)
	if err != nil || len(errs) != 2 {
		t.Fatalf("%+v %v", errs, err)
	}
	if errs[0].Index != 1 || errs[0].StatusCode != 400 || errs[0].ErrCode != "context_length_exceeded" || errs[0].OK() ||
		errs[1].Index != 3 || errs[1].StatusCode != 500 {
		t.Fatalf("%+v", errs)
	}
}

func TestFakeExpiryKeepsWhatWasAnswered(t *testing.T) {
	for _, mark := range []bool{false, true} {
		t.Run(fmt.Sprint("mark=", mark), func(t *testing.T) {
			c := startFake(t, &fakehf.Batch{ExpireAfter: 4, MarkUnanswered: mark})
			end := submit(t, c, input(t, 10, text))
			if end.Status != StatusExpired || end.Counts.Completed != 4 {
				t.Fatalf("%+v", end)
			}
			out, err := results(t, c, end.OutputFileID)
			if err != nil || len(out) != 4 || out[3].Index != 3 {
				t.Fatalf("%+v %v", out, err)
			}
			errs, err := results(t, c, end.ErrorFileID)
			if err != nil || mark && (len(errs) != 6 || errs[0].ErrCode != CodeBatchExpired || errs[0].StatusCode != 0 || errs[0].Body != nil) || !mark && errs != nil {
				t.Fatalf("%+v %v", errs, err)
			}
		})
	}
}

func TestFakeCancel(t *testing.T) {
	fb := &fakehf.Batch{Steps: 3, MarkUnanswered: true}
	c := startFake(t, fb)
	ctx := context.Background()
	f, err := c.Upload(ctx, "rows.jsonl", input(t, 8, text))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Create(ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Get(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
	}
	b, err = c.Cancel(ctx, b.ID)
	if err != nil || b.Status != StatusCancelling || b.Ended() {
		t.Fatalf("%+v %v", b, err)
	}
	end := poll(t, c, b.ID)
	out, err := results(t, c, end.OutputFileID)
	if end.Status != StatusCancelled || err != nil || len(out) != end.Counts.Completed || len(out) == 0 {
		t.Fatalf("%+v: %d lines, %v", end, len(out), err)
	}
	errs, err := results(t, c, end.ErrorFileID)
	if err != nil || len(errs)+len(out) != 8 || errs[0].ErrCode != CodeBatchCancelled {
		t.Fatalf("%+v %v", errs, err)
	}
	_, err = c.Cancel(ctx, b.ID) // an ended batch: 409, not retryable
	if e, ok := AsError(err); !ok || e.Status != 409 || e.Retryable() {
		t.Fatalf("%v", err)
	}
}

func TestFakeTokenLimit(t *testing.T) {
	in := input(t, 5, text)
	again := bytes.NewBuffer(append([]byte(nil), in.Bytes()...))
	tokens := 0
	for _, l := range bytes.Split(bytes.TrimSpace(in.Bytes()), []byte("\n")) {
		var r struct {
			Body json.RawMessage `json:"body"`
		}
		_ = json.Unmarshal(l, &r)
		tokens += fakehf.BatchTokens(r.Body)
	}
	c := startFake(t, &fakehf.Batch{TokenLimit: tokens + tokens/2})
	ctx := context.Background()
	f1, err := c.Upload(ctx, "a.jsonl", in)
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.Create(ctx, f1.ID)
	if err != nil {
		t.Fatal(err)
	}
	f2, err := c.Upload(ctx, "b.jsonl", again)
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Create(ctx, f2.ID)
	if err != nil {
		t.Fatal(err)
	}
	refused := poll(t, c, second.ID)
	if refused.Status != StatusFailed || !refused.HasError(CodeTokenLimitExceeded) || refused.OutputFileID != "" || refused.Errors[0].Message == "" {
		t.Fatalf("%+v", refused)
	}
	if done := poll(t, c, first.ID); done.Status != StatusCompleted {
		t.Fatalf("%+v", done)
	}
	third, err := c.Create(ctx, f2.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done := poll(t, c, third.ID); done.Status != StatusCompleted || done.Counts.Completed != 5 {
		t.Fatalf("%+v", done)
	}
}

func TestFakeLimits(t *testing.T) {
	c := startFake(t, &fakehf.Batch{MaxRequests: 3, MaxFileBytes: 4000})
	_, err := c.Upload(context.Background(), "big.jsonl", input(t, 40, text))
	if e, ok := AsError(err); !ok || e.Status != 400 || e.Outcome() != outcome.UpstreamRequestRejected || e.Retryable() {
		t.Fatalf("%v", err)
	}
	end := submit(t, c, input(t, 5, text))
	if end.Status != StatusFailed || len(end.Errors) == 0 || end.Errors[0].Code == "" {
		t.Fatalf("%+v", end)
	}
}

func TestFakeGarbledOutputIsRefused(t *testing.T) {
	for _, c := range []struct {
		name, line, want string
	}{
		{"malformed", `{"custom_id":"r2","response":{"status_code":200,`, "result line 3: not valid JSON"},
		{"never sent form", `{"custom_id":"row-2","response":{"status_code":200,"body":{}},"error":null}`, "result line 3: custom_id of the wrong form"},
		{"neither", `{"custom_id":"r2","response":null,"error":null}`, "result line 3: neither a response nor an error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := startFake(t, &fakehf.Batch{Garble: func(id string) ([]byte, bool) { return []byte(c.line), id == "r2" }})
			end := submit(t, cl, input(t, 5, text))
			out, err := results(t, cl, end.OutputFileID)
			if err == nil || !strings.Contains(err.Error(), c.want) || len(out) != 2 {
				t.Fatalf("%d results, %v", len(out), err)
			}
		})
	}
}

// A run can find its batches again: CreateWith tags them, List gives them
// newest first with their tags and input files (a create whose answer was
// lost is found by its input file, and not made twice).
func TestFakeListFindsTaggedBatches(t *testing.T) {
	c := startFake(t, &fakehf.Batch{})
	ctx := context.Background()
	var files []string
	for i := range 2 {
		f, err := c.Upload(ctx, "rows.jsonl", input(t, 3, text))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f.ID)
		if _, err := c.CreateWith(ctx, f.ID, map[string]string{"hfsent_run": "run-1", "part": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	page, more, err := c.List(ctx, "", 10)
	if err != nil || more || len(page) != 2 {
		t.Fatalf("%+v %v %v", page, more, err)
	}
	if page[0].InputFileID != files[1] || page[1].InputFileID != files[0] || page[0].Metadata["hfsent_run"] != "run-1" || page[1].Metadata["part"] != "0" {
		t.Fatalf("%+v", page)
	}
	if _, err := c.CreateWith(ctx, files[0], map[string]string{"k": strings.Repeat("v", MaxMetadataValue+1)}); err == nil {
		t.Fatal("an over-long metadata value was sent")
	}
	if _, _, err := c.List(ctx, "../x", 10); err == nil {
		t.Fatal("a bad after id was sent")
	}
	if n := len(page); fakeCreates(t, c) != 2 || n != 2 {
		t.Fatalf("creates %d", fakeCreates(t, c))
	}
}

// List pages as the provider does: limit outside 1..100 is not sent (the
// provider's 20), after is the last id of the page before, and more says
// whether a page follows; walked so, every batch comes once, newest first.
func TestFakeListPages(t *testing.T) {
	c := startFake(t, &fakehf.Batch{})
	ctx := context.Background()
	f, err := c.Upload(ctx, "rows.jsonl", input(t, 1, text))
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	for range 25 {
		b, err := c.Create(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		made = append([]string{b.ID}, made...)
	}
	for _, limit := range []int{0, 101, 7, 100} {
		var seen []string
		after, pages := "", 0
		for {
			page, more, err := c.List(ctx, after, limit)
			if err != nil {
				t.Fatalf("limit %d: %v", limit, err)
			}
			pages++
			if want := min(25-len(seen), map[bool]int{true: limit, false: 20}[limit >= 1 && limit <= 100]); len(page) != want {
				t.Fatalf("limit %d, page %d: %d batches, want %d", limit, pages, len(page), want)
			}
			for _, b := range page {
				seen = append(seen, b.ID)
			}
			if !more {
				break
			}
			after = page[len(page)-1].ID
		}
		if fmt.Sprint(seen) != fmt.Sprint(made) {
			t.Fatalf("limit %d: %v; want %v", limit, seen, made)
		}
	}
}

// fakeCreates is how many batches the fake holds, through List.
func fakeCreates(t *testing.T, c *Client) int {
	t.Helper()
	page, _, err := c.List(context.Background(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	return len(page)
}

// DeleteFile removes an input file once its batch is done; a second
// delete is a 404, not retried.
func TestFakeDeleteFile(t *testing.T) {
	c := startFake(t, &fakehf.Batch{})
	end := submit(t, c, input(t, 2, text))
	ctx := context.Background()
	if err := c.DeleteFile(ctx, end.InputFileID); err != nil {
		t.Fatal(err)
	}
	err := c.DeleteFile(ctx, end.InputFileID)
	if e, ok := AsError(err); !ok || e.Status != 404 || e.Retryable() {
		t.Fatalf("%v", err)
	}
	if out, err := results(t, c, end.OutputFileID); err != nil || len(out) != 2 {
		t.Fatalf("%v %v", out, err)
	}
}
