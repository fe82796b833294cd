package batchapi

import (
	"context"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"time"
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
	ID               string  `json:"id"`
	Object           string  `json:"object"`
	Endpoint         string  `json:"endpoint"`
	Status           string  `json:"status"`
	InputFileID      string  `json:"input_file_id"`
	OutputFileID     *string `json:"output_file_id"`
	ErrorFileID      *string `json:"error_file_id"`
	CompletionWindow string  `json:"completion_window"`
	CreatedAt        int64   `json:"created_at"`
	ExpiresAt        *int64  `json:"expires_at"`
	RequestCounts    *struct {
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

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// Upload streams jsonl to {root}/files as a batch input file (multipart,
// purpose=batch) under the file name name. The file is never held whole in
// memory: it is copied from jsonl into the request as the request is sent.
// It is bounded by ctx only (Timeout would cut a large file).
// jsonl is read to its end or to the first error; Upload returns only once
// it reads it no more. An upload is not retried: it may have been stored.
func (c *Client) Upload(ctx context.Context, name string, jsonl io.Reader) (File, error) {
	const op = "upload"
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	var wg sync.WaitGroup
	var sent int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, err := writeMultipart(mw, name, jsonl)
		sent = n
		pw.CloseWithError(err) // nil: EOF for the reader
	}()
	// Whatever happens to the request, the writer is stopped and waited
	// for before Upload returns: jsonl is the caller's again.
	defer func() {
		pr.CloseWithError(errUploadDone)
		wg.Wait()
	}()

	req, err := c.newRequest(ctx, http.MethodPost, "/files", pr)
	if err != nil {
		return File{}, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := c.send(ctx, op, req)
	if err != nil {
		return File{}, err
	}
	defer resp.Body.Close()
	var w wireFile
	if err := decode(op, resp, &w); err != nil {
		return File{}, err
	}
	if w.ID == "" {
		return File{}, &Error{Op: op, Status: resp.StatusCode, msg: "the answer is not a file (no id)"}
	}
	pr.CloseWithError(errUploadDone)
	wg.Wait()
	if w.Bytes != 0 && w.Bytes != sent && c.Log != nil {
		c.Log.Warn("the provider stored a batch input file of another size than sent", "file", w.ID, "sent", sent, "stored", w.Bytes)
	}
	return File{ID: w.ID, Bytes: w.Bytes, Status: w.Status}, nil
}

var errUploadDone = fmt.Errorf("upload ended")

// writeMultipart writes the form: purpose=batch, then the file. It returns
// the file's bytes copied.
func writeMultipart(mw *multipart.Writer, name string, jsonl io.Reader) (int64, error) {
	if err := mw.WriteField("purpose", "batch"); err != nil {
		return 0, err
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, quoteName(name)))
	h.Set("Content-Type", "application/jsonl")
	part, err := mw.CreatePart(h)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(part, jsonl)
	if err != nil {
		return n, err
	}
	return n, mw.Close()
}

// quoteName makes a file name safe inside a quoted header parameter.
func quoteName(s string) string {
	if s == "" {
		s = "batch.jsonl"
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\r", "", "\n", "").Replace(s)
}

// Create creates a batch of the requests in the uploaded file inputFileID,
// for /v1/chat/completions within 24h. It is not retried: a batch made
// twice is paid for twice.
func (c *Client) Create(ctx context.Context, inputFileID string) (Batch, error) {
	const op = "create"
	in := map[string]string{"input_file_id": inputFileID, "endpoint": EndpointChat, "completion_window": CompletionWindow}
	var w wireBatch
	if err := c.do(ctx, op, http.MethodPost, "/batches", in, &w, false); err != nil {
		return Batch{}, err
	}
	return w.batch(op, c.Token)
}

// Get asks for a batch as it is now. It is retried (429, 5xx, no answer).
func (c *Client) Get(ctx context.Context, id string) (Batch, error) {
	const op = "get"
	var w wireBatch
	if err := c.do(ctx, op, http.MethodGet, "/batches/"+url.PathEscape(id), nil, &w, true); err != nil {
		return Batch{}, err
	}
	return w.batch(op, c.Token)
}

// Cancel asks the provider to cancel a batch; it answers "cancelling",
// later "cancelled" (Get). The rows it completed stay in its output.
func (c *Client) Cancel(ctx context.Context, id string) (Batch, error) {
	const op = "cancel"
	var w wireBatch
	if err := c.do(ctx, op, http.MethodPost, "/batches/"+url.PathEscape(id)+"/cancel", nil, &w, false); err != nil {
		return Batch{}, err
	}
	return w.batch(op, c.Token)
}

// Content opens a file's content ({root}/files/{id}/content) as a stream.
// Opening it is retried (429, 5xx, no answer); once it is open, a read
// error is the stream's, and ctx still bounds it. Close it.
func (c *Client) Content(ctx context.Context, fileID string) (io.ReadCloser, error) {
	const op = "content"
	var body io.ReadCloser
	err := c.retry(ctx, op, func(ctx context.Context) error {
		// The stream outlives the wait for its headers: a timer cancels
		// the attempt if no headers come in time, and is stopped once they
		// do. Closing the stream cancels it.
		sctx, cancel := context.WithCancel(ctx)
		req, err := c.newRequest(sctx, http.MethodGet, "/files/"+url.PathEscape(fileID)+"/content", nil)
		if err != nil {
			cancel()
			return err
		}
		req.Header.Set("Accept", "application/jsonl, application/json, */*")
		t := time.AfterFunc(c.timeout(), cancel)
		resp, err := c.send(ctx, op, req)
		if !t.Stop() && ctx.Err() == nil {
			// The timer fired: whatever came, the stream is cut.
			if err == nil {
				resp.Body.Close()
			}
			err = &Error{Op: op, msg: fmt.Sprintf("no answer within %s", c.timeout()), Err: errTimeout}
		}
		if err != nil {
			cancel()
			return err
		}
		body = &stream{ReadCloser: resp.Body, cancel: cancel}
		return nil
	})
	return body, err
}

// stream is a content body whose Close also ends its context.
type stream struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (s *stream) Close() error {
	err := s.ReadCloser.Close()
	s.cancel()
	return err
}
