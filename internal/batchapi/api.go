package batchapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// wireFile is OpenAI's FileObject, the fields read.
type wireFile struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Bytes  int64  `json:"bytes"`
	Status string `json:"status"`
}

// wireBatch is OpenAI's Batch object, the fields read.
type wireBatch struct {
	ID               string         `json:"id"`
	Object           string         `json:"object"`
	Endpoint         string         `json:"endpoint"`
	Status           string         `json:"status"`
	InputFileID      string         `json:"input_file_id"`
	OutputFileID     *string        `json:"output_file_id"`
	ErrorFileID      *string        `json:"error_file_id"`
	CompletionWindow string         `json:"completion_window"`
	CreatedAt        int64          `json:"created_at"`
	ExpiresAt        *int64         `json:"expires_at"`
	Model            *string        `json:"model"`
	Metadata         map[string]any `json:"metadata"`
	Usage            *struct {
		InputTokens  int `json:"input_tokens"`
		OutputTokens int `json:"output_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
	RequestCounts *struct {
		Total     int `json:"total"`
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	} `json:"request_counts"`
	Errors *struct {
		Data []struct {
			Code    *string `json:"code"`
			Message *string `json:"message"`
			Param   *string `json:"param"`
			Line    *int    `json:"line"`
		} `json:"data"`
	} `json:"errors"`
}

func (w wireBatch) batch(op, token string) (Batch, error) {
	if w.ID == "" || w.Status == "" {
		return Batch{}, &Error{Op: op, Status: 200, msg: "the answer is not a batch (no id or no status)"}
	}
	b := Batch{ID: w.ID, Status: w.Status, InputFileID: w.InputFileID, Endpoint: w.Endpoint,
		CompletionWindow: w.CompletionWindow, CreatedAt: w.CreatedAt}
	b.OutputFileID, b.ErrorFileID = deref(w.OutputFileID), deref(w.ErrorFileID)
	if w.ExpiresAt != nil {
		b.ExpiresAt = *w.ExpiresAt
	}
	b.Model = clean(deref(w.Model), 200)
	for k, v := range w.Metadata {
		if s, ok := v.(string); ok {
			if b.Metadata == nil {
				b.Metadata = map[string]string{}
			}
			b.Metadata[k] = s
		}
	}
	if u := w.Usage; u != nil {
		b.Usage = Usage{Input: u.InputTokens, Output: u.OutputTokens, Total: u.TotalTokens}
	}
	if rc := w.RequestCounts; rc != nil {
		b.Counts = RequestCounts{Total: rc.Total, Completed: rc.Completed, Failed: rc.Failed}
	}
	if w.Errors != nil {
		for _, d := range w.Errors.Data {
			e := BatchError{Code: clean(deref(d.Code), 100), Message: Summarise(deref(d.Message), token), Param: clean(deref(d.Param), 100)}
			if d.Line != nil {
				e.Line = *d.Line
			}
			b.Errors = append(b.Errors, e)
		}
	}
	return b, nil
}

// batch is w as a Batch; a status this client does not know is kept, and
// told once per call: the provider may have added one.
func (c *Client) batch(op string, w wireBatch) (Batch, error) {
	b, err := w.batch(op, c.Token)
	if err == nil && !knownStatus(b.Status) && c.Log != nil {
		c.Log.Warn("the provider answered a batch status this client does not know; the batch is taken as not ended", "batch", b.ID, "status", clean(b.Status, 40))
	}
	return b, err
}

// maxID bounds a file or batch id.
const maxID = 256

// checkID refuses an id that is not one: empty, too long, or holding what
// would change the path it is put in ("/", "?", "#", "%", a dot segment,
// spaces or control characters). The ids come from the provider and from
// a resume file, which may have been edited.
func checkID(op, kind, id string) error {
	bad := id == "" || len(id) > maxID || id == "." || id == ".." || strings.ContainsAny(id, "/?#%\\")
	for i := 0; i < len(id) && !bad; i++ {
		bad = id[i] <= ' ' || id[i] >= 0x7f
	}
	if bad {
		return &Error{Op: op, msg: fmt.Sprintf("%q is not a %s id", clean(id, 60), kind), local: true}
	}
	return nil
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Create creates a batch of the requests in the uploaded file inputFileID,
// for /v1/chat/completions within 24h. It is retried only after a 429
// (which made no batch), never after another failure: a batch made
// twice is paid for twice (record the file id before, and List to find a
// batch whose create was sent but whose answer was lost).
func (c *Client) Create(ctx context.Context, inputFileID string) (Batch, error) {
	return c.CreateWith(ctx, inputFileID, nil)
}

// Metadata limits, as OpenAI sets them.
const (
	MaxMetadataKeys  = 16
	MaxMetadataKey   = 64
	MaxMetadataValue = 512
)

// CreateWith is Create with metadata on the batch (nil: none): a run can
// tag its batches, to find them again with List.
func (c *Client) CreateWith(ctx context.Context, inputFileID string, metadata map[string]string) (Batch, error) {
	const op = "create"
	if err := checkID(op, "file", inputFileID); err != nil {
		return Batch{}, err
	}
	if len(metadata) > MaxMetadataKeys {
		return Batch{}, &Error{Op: op, msg: fmt.Sprintf("%d metadata keys, over the %d allowed", len(metadata), MaxMetadataKeys), local: true}
	}
	for k, v := range metadata {
		if k == "" || len(k) > MaxMetadataKey || len(v) > MaxMetadataValue {
			return Batch{}, &Error{Op: op, msg: fmt.Sprintf("metadata %q: keys of 1 to %d characters, values of at most %d", clean(k, 64), MaxMetadataKey, MaxMetadataValue), local: true}
		}
	}
	in := map[string]any{"input_file_id": inputFileID, "endpoint": EndpointChat, "completion_window": CompletionWindow}
	if len(metadata) > 0 {
		in["metadata"] = metadata
	}
	var w wireBatch
	if err := c.do(ctx, op, http.MethodPost, "/batches", in, &w, false); err != nil {
		return Batch{}, err
	}
	return c.batch(op, w)
}

// List is a page of the account's batches, newest first: at most limit
// (1 to 100; else the provider's default, 20), after the batch id after
// ("": from the newest). more says another page follows; ask it with
// after = the last batch's ID. It is retried as Get is.
func (c *Client) List(ctx context.Context, after string, limit int) (page []Batch, more bool, err error) {
	const op = "list"
	q := url.Values{}
	if after != "" {
		if err := checkID(op, "batch", after); err != nil {
			return nil, false, err
		}
		q.Set("after", after)
	}
	if limit >= 1 && limit <= 100 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/batches"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var w struct {
		Object  string      `json:"object"`
		Data    []wireBatch `json:"data"`
		HasMore bool        `json:"has_more"`
	}
	if err := c.do(ctx, op, http.MethodGet, path, nil, &w, true); err != nil {
		return nil, false, err
	}
	for _, wb := range w.Data {
		b, err := c.batch(op, wb)
		if err != nil {
			return nil, false, err
		}
		page = append(page, b)
	}
	return page, w.HasMore, nil
}

// Get asks for a batch as it is now. It is retried (429, 5xx, no answer).
func (c *Client) Get(ctx context.Context, id string) (Batch, error) {
	const op = "get"
	if err := checkID(op, "batch", id); err != nil {
		return Batch{}, err
	}
	var w wireBatch
	if err := c.do(ctx, op, http.MethodGet, "/batches/"+id, nil, &w, true); err != nil {
		return Batch{}, err
	}
	return c.batch(op, w)
}

// Cancel asks the provider to cancel a batch; it answers "cancelling",
// later "cancelled" (Get). The rows it completed stay in its output.
func (c *Client) Cancel(ctx context.Context, id string) (Batch, error) {
	const op = "cancel"
	if err := checkID(op, "batch", id); err != nil {
		return Batch{}, err
	}
	var w wireBatch
	if err := c.do(ctx, op, http.MethodPost, "/batches/"+id+"/cancel", nil, &w, false); err != nil {
		return Batch{}, err
	}
	return c.batch(op, w)
}

// DeleteFile deletes an uploaded or result file ({root}/files/{id}): a
// run's input files need not stay in the account's storage once its
// batches are collected. It is retried as Get is (a delete is idempotent);
// a file already gone is an *Error with Status 404.
func (c *Client) DeleteFile(ctx context.Context, fileID string) error {
	const op = "delete"
	if err := checkID(op, "file", fileID); err != nil {
		return err
	}
	var w struct {
		ID      string `json:"id"`
		Deleted bool   `json:"deleted"`
	}
	if err := c.do(ctx, op, http.MethodDelete, "/files/"+fileID, nil, &w, true); err != nil {
		return err
	}
	if !w.Deleted {
		return &Error{Op: op, Status: 200, msg: "the provider did not say the file was deleted"}
	}
	return nil
}

// Content opens a file's content ({root}/files/{id}/content) as a stream.
// Opening it is retried (429, 5xx, no answer); once it is open, a read
// error is the stream's, and ctx still bounds it. Close it.
func (c *Client) Content(ctx context.Context, fileID string) (io.ReadCloser, error) {
	const op = "content"
	if err := checkID(op, "file", fileID); err != nil {
		return nil, err
	}
	var body io.ReadCloser
	err := c.retry(ctx, op, func(ctx context.Context) error {
		// The stream outlives the wait for its headers: a watchdog
		// cancels the attempt if no headers come within Timeout, then if
		// no data comes for as long. Closing the stream cancels it.
		sctx, cancel := context.WithCancel(ctx)
		req, err := c.newRequest(sctx, op, http.MethodGet, "/files/"+fileID+"/content", nil)
		if err != nil {
			cancel()
			return err
		}
		req.Header.Set("Accept", "application/jsonl, application/json, */*")
		dog := newWatchdog(c.timeout(), cancel)
		resp, err := c.send(ctx, op, req)
		if err != nil {
			if dog.stop() && ctx.Err() == nil {
				err = &Error{Op: op, msg: fmt.Sprintf("no answer within %s", c.timeout()), Err: errTimeout}
			}
			cancel()
			return err
		}
		body = &stream{ReadCloser: resp.Body, cancel: cancel, dog: dog, ctx: ctx}
		return nil
	})
	return body, err
}

// stream is a content body that must make progress (its watchdog), and
// whose Close also ends its context.
type stream struct {
	io.ReadCloser
	cancel context.CancelFunc
	dog    *watchdog
	ctx    context.Context // the caller's
}

func (s *stream) Read(p []byte) (int, error) {
	n, err := s.ReadCloser.Read(p)
	switch {
	case err == nil || err == io.EOF:
		s.dog.kick()
	case s.dog.fired.Load() && s.ctx.Err() == nil:
		err = &Error{Op: "content", msg: fmt.Sprintf("the download stalled: no data for %s", s.dog.wait()), Err: errTimeout}
	}
	return n, err
}

func (s *stream) Close() error {
	s.dog.stop()
	err := s.ReadCloser.Close()
	s.cancel()
	return err
}
