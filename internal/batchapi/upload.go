package batchapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"time"
)

// Upload streams jsonl to {root}/files as a batch input file (multipart,
// purpose=batch) under the file name name. The file is never held whole in
// memory: it is copied from jsonl into the request as the request is sent.
// When jsonl's size is known (a regular *os.File, or anything with Len,
// such as a bytes.Buffer) the request says its Content-Length, as curl -F
// and the SDKs do; else it is sent chunked, through an io.Pipe. Upload
// returns only once it reads jsonl no more. A file that moves is bounded by
// ctx only; a stall is cut (Client.Timeout). It is not retried: the file
// may have been stored.
func (c *Client) Upload(ctx context.Context, name string, jsonl io.Reader) (File, error) {
	const op = "upload"
	if err := ctx.Err(); err != nil {
		return File{}, fmt.Errorf("batch API %s: %w", op, context.Cause(ctx))
	}
	size, sized := sizeOf(jsonl)
	if !sized {
		return c.uploadPiped(ctx, op, name, jsonl)
	}
	pre, post, ctype := framing(name)
	g := &guarded{r: io.LimitReader(jsonl, size)}
	// Whatever happens to the request, jsonl is read no more once Upload
	// returns: it is the caller's again.
	defer g.stop()
	body := io.MultiReader(bytes.NewReader(pre), g, bytes.NewReader(post))
	f, err := c.postFile(ctx, op, body, ctype, int64(len(pre))+size+int64(len(post)))
	if n := g.stop(); err != nil && g.ended && n < size {
		return File{}, fmt.Errorf("batch API %s: the input ended after %d of the %d bytes it had when the upload began (did it change?)", op, n, size)
	} else if err == nil {
		c.checkSize(f, n)
	}
	return f, err
}

// uploadPiped sends a file of unknown size chunked, written into the
// request through an io.Pipe as the request is sent.
func (c *Client) uploadPiped(ctx context.Context, op, name string, jsonl io.Reader) (File, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	var wg sync.WaitGroup
	var n int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		k, err := writeMultipart(mw, name, jsonl)
		n = k
		pw.CloseWithError(err) // nil: EOF for the reader
	}()
	stop := func() { pr.CloseWithError(errUploadDone); wg.Wait() }
	defer stop()
	f, err := c.postFile(ctx, op, pr, mw.FormDataContentType(), -1)
	if err == nil {
		stop()
		c.checkSize(f, n)
	}
	return f, err
}

// storeWait is how long an upload waits for the provider's answer once it
// has sent the whole file: the provider may check a 200 MB file first.
func (c *Client) storeWait() time.Duration { return 10 * c.timeout() }

// checkSize warns when the provider stored another size than was sent.
func (c *Client) checkSize(f File, sent int64) {
	if f.Bytes != 0 && f.Bytes != sent && c.Log != nil {
		c.Log.Warn("the provider stored a batch input file of another size than sent", "file", f.ID, "sent", sent, "stored", f.Bytes)
	}
}

// postFile sends the form. A watchdog cuts it when the provider reads
// nothing of it for Timeout, or, once it has it all, does not answer
// within storeWait.
func (c *Client) postFile(ctx context.Context, op string, body io.Reader, ctype string, length int64) (File, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dog := newWatchdog(c.timeout(), cancel)
	defer dog.stop()
	req, err := c.newRequest(sctx, op, http.MethodPost, "/files", &kicking{r: body, dog: dog, after: c.storeWait()})
	if err != nil {
		return File{}, err
	}
	req.Header.Set("Content-Type", ctype)
	if length >= 0 {
		req.ContentLength = length
	}
	stalled := func(err error) error {
		if dog.stop() && ctx.Err() == nil {
			return &Error{Op: op, msg: fmt.Sprintf("the provider stopped reading the file, or did not answer, for %s", dog.wait()), Err: errTimeout}
		}
		return err
	}
	resp, err := c.send(ctx, op, req)
	if err != nil {
		return File{}, stalled(err)
	}
	defer resp.Body.Close()
	var w wireFile
	if err := decode(op, resp, &w); err != nil {
		return File{}, stalled(err)
	}
	if w.ID == "" {
		return File{}, &Error{Op: op, Status: resp.StatusCode, msg: "the answer is not a file (no id)"}
	}
	return File{ID: w.ID, Bytes: w.Bytes, Status: w.Status}, nil
}

var errUploadDone = errors.New("upload ended")

// sizeOf is how many bytes r has left to read, when that is known.
func sizeOf(r io.Reader) (int64, bool) {
	switch v := r.(type) {
	case interface{ Len() int }:
		return int64(v.Len()), true
	case interface {
		Stat() (fs.FileInfo, error)
		io.Seeker
	}:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return 0, false
		}
		at, err := v.Seek(0, io.SeekCurrent)
		if err != nil || at > fi.Size() {
			return 0, false
		}
		return fi.Size() - at, true
	}
	return 0, false
}

// framing is the multipart form around the file's bytes: what comes
// before them, what comes after, and the Content-Type.
func framing(name string) (pre, post []byte, ctype string) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	// Writes to a bytes.Buffer do not fail.
	_ = mw.WriteField("purpose", "batch")
	_, _ = mw.CreatePart(fileHeader(name))
	n := b.Len()
	_ = mw.Close()
	all := b.Bytes()
	return all[:n], all[n:], mw.FormDataContentType()
}

// writeMultipart writes the form: purpose=batch, then the file. It returns
// the file's bytes copied.
func writeMultipart(mw *multipart.Writer, name string, jsonl io.Reader) (int64, error) {
	if err := mw.WriteField("purpose", "batch"); err != nil {
		return 0, err
	}
	part, err := mw.CreatePart(fileHeader(name))
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(part, jsonl)
	if err != nil {
		return n, err
	}
	return n, mw.Close()
}

func fileHeader(name string) textproto.MIMEHeader {
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, quoteName(name)))
	h.Set("Content-Type", "application/jsonl")
	return h
}

// quoteName makes a file name safe inside a quoted header parameter.
func quoteName(s string) string {
	if s == "" {
		s = "batch.jsonl"
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\r", "", "\n", "").Replace(s)
}

// guarded reads r until stopped, counting; once stopped it reads r no more
// (net/http may go on reading a request's body after Do has returned).
type guarded struct {
	mu      sync.Mutex
	r       io.Reader
	n       int64
	ended   bool // r said io.EOF
	stopped bool
}

func (g *guarded) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return 0, errUploadDone
	}
	k, err := g.r.Read(p)
	g.n += int64(k)
	if err == io.EOF {
		g.ended = true
	}
	return k, err
}

// stop ends the reading, once any Read under way is done, and returns the
// bytes read.
func (g *guarded) stop() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped = true
	return g.n
}
