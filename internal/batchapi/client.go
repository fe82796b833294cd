package batchapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/redact"
)

// Client calls an OpenAI-style Files and Batches API under Root (e.g.
// "https://api.openai.com/v1": the chat endpoint without its trailing
// /chat/completions, RootOf). The zero value of every field but Root is
// usable. A Client is safe for concurrent use once its fields are set.
type Client struct {
	// HTTP is the client calls go through; nil: one built on the
	// project's transport (provider.NewHTTPClient). Its CheckRedirect is
	// replaced: a POST is never redirected (its streamed body cannot be
	// sent twice), a GET follows up to 10.
	HTTP *http.Client
	Root string
	// Token is sent as "Authorization: Bearer <Token>" ("": none). It is
	// never logged, and redacted from anything the provider says back.
	Token string
	// Log is told of retries (nil: not told).
	Log *slog.Logger
	// UserAgent is sent as User-Agent ("": "hfsent").
	UserAgent string
	// Timeout bounds one attempt of a small call (create, get, cancel), the
	// wait for a download's headers, and any stall of a stream: a download
	// that brings no data, an upload the provider reads nothing of, for
	// that long, is cut (an upload may then wait 10 times as long for the
	// answer, while the provider stores the file). <= 0: 60s. A stream
	// that moves is bounded by its context only.
	Timeout time.Duration
	// Retries is how many times an idempotent call (get, list, content,
	// delete) is sent again after a 429, a 5xx, a 408, no answer or an
	// answer cut short; < 0: never, 0: 4. Upload, create and cancel are
	// never sent again by the client (Error.Retryable and Error.Connect say
	// whether the caller may).
	Retries int
	// Backoff is the first retry's wait (doubled each time, with full
	// jitter, at most MaxBackoff); <= 0: 1s, and MaxBackoff 30s. A Retry-After the provider
	// gives is waited instead, when it is at most MaxBackoff; a longer one
	// is not waited here but returned (Error.RetryAfter).
	Backoff, MaxBackoff time.Duration

	hc atomic.Pointer[http.Client] // HTTP with CheckRedirect set, made once
}

// maxObject bounds a JSON answer (a batch object lists at most a few
// thousand validation errors).
const maxObject = 16 << 20

// RootOf is the API root of a chat completions endpoint: the endpoint with
// its trailing /chat/completions removed ("https://api.openai.com/v1").
// Its error shows the endpoint redacted.
func RootOf(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q is not an http:// or https:// URL", redact.URL(endpoint))
	}
	p := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(p, "/chat/completions") {
		return "", fmt.Errorf("%q does not end in /chat/completions: the Batch API's root cannot be found from it", redact.URL(endpoint))
	}
	u.Path = strings.TrimSuffix(p, "/chat/completions")
	u.RawPath = ""
	u.Fragment = ""
	return u.String(), nil
}

func (c *Client) client() *http.Client {
	if hc := c.hc.Load(); hc != nil {
		return hc
	}
	base := c.HTTP
	if base == nil {
		base = provider.NewHTTPClient(4, 10*time.Second)
	}
	hc := *base
	hc.CheckRedirect = checkRedirect
	c.hc.CompareAndSwap(nil, &hc)
	return c.hc.Load()
}

func checkRedirect(req *http.Request, via []*http.Request) error {
	if req.Method != http.MethodGet || len(via) >= 10 {
		return http.ErrUseLastResponse
	}
	return nil
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return 60 * time.Second
}

// url is Root + path (which may end in a query); the query of Root (a key
// some proxies take) is kept, before path's.
func (c *Client) url(op, path string) (string, error) {
	u, err := url.Parse(c.Root)
	if err != nil || u.Host == "" {
		return "", &Error{Op: op, msg: fmt.Sprintf("root %q is not a URL", redact.URL(c.Root)), local: true}
	}
	path, query, _ := strings.Cut(path, "?")
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	u.RawPath = ""
	if query != "" {
		if u.RawQuery != "" {
			query = u.RawQuery + "&" + query
		}
		u.RawQuery = query
	}
	return u.String(), nil
}

func (c *Client) newRequest(ctx context.Context, op, method, path string, body io.Reader) (*http.Request, error) {
	target, err := c.url(op, path)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, &Error{Op: op, msg: "cannot build the request", Err: err, local: true}
	}
	req.Header.Set("Accept", "application/json")
	ua := c.UserAgent
	if ua == "" {
		ua = "hfsent"
	}
	req.Header.Set("User-Agent", ua)
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

// send makes one attempt. A non-2xx answer is read (a bounded prefix) and
// closed, and returned as an *Error; a 2xx's body is the caller's to close.
func (c *Client) send(ctx context.Context, op string, req *http.Request) (*http.Response, error) {
	resp, err := c.client().Do(req)
	if err != nil {
		return nil, c.transportError(ctx, op, err)
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrBody))
	return nil, statusError(op, resp, body, c.Token, time.Now())
}

// transportError is the error for a call that got no answer. Nothing of
// net/http's message (which names the URL) is shown.
func (c *Client) transportError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("batch API %s: %w", op, context.Cause(ctx))
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redact.URL(ue.URL)
	}
	host := "the provider"
	if u, perr := url.Parse(c.Root); perr == nil && u.Hostname() != "" {
		host = u.Hostname()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Op: op, msg: fmt.Sprintf("no answer from %s within %s", host, c.timeout()), Err: errors.Join(errTimeout, err)}
	}
	var oe interface{ Timeout() bool }
	if errors.As(err, &oe) && oe.Timeout() {
		return &Error{Op: op, msg: "connection to " + host + " timed out", Err: errors.Join(errTimeout, err)}
	}
	e := &Error{Op: op, msg: "connection to " + host + " failed", Err: err}
	if isDial(err) {
		e.Connect, e.msg = true, "cannot connect to "+host
	}
	return e
}

func isDial(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && ne.Op == "dial"
}

// do sends a small call (no body or a JSON one) and decodes a 2xx JSON
// answer into v. idempotent calls are retried (retry).
func (c *Client) do(ctx context.Context, op, method, path string, in, v any, idempotent bool) error {
	var payload []byte
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return &Error{Op: op, msg: "cannot encode the request", Err: err, local: true}
		}
		payload = b
	}
	attempt := func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, c.timeout())
		defer cancel()
		var body io.Reader
		if payload != nil {
			body = bytes.NewReader(payload)
		}
		req, err := c.newRequest(actx, op, method, path, body)
		if err != nil {
			return err
		}
		if payload != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := c.send(ctx, op, req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		return decode(op, resp, v)
	}
	if !idempotent {
		return c.retry429(ctx, op, attempt)
	}
	return c.retry(ctx, op, attempt)
}

// notRetried carries an error retry must return as it is.
type notRetried struct{ err error }

func (n notRetried) Error() string { return n.err.Error() }

// retry429 retries a call that is not idempotent (a batch's create) only
// after a 429, which refused it before it did anything (no batch made),
// waited for as the GETs' are; any other failure is returned at once.
func (c *Client) retry429(ctx context.Context, op string, attempt func(context.Context) error) error {
	err := c.retry(ctx, op, func(ctx context.Context) error {
		err := attempt(ctx)
		if e, ok := AsError(err); ok && e.Status == 429 && e.Code != "insufficient_quota" {
			return err
		}
		if err != nil {
			return notRetried{err}
		}
		return nil
	})
	if n, ok := err.(notRetried); ok {
		return n.err
	}
	return err
}

// decode reads a 2xx JSON answer into v, bounded.
func decode(op string, resp *http.Response, v any) error {
	dec := json.NewDecoder(io.LimitReader(resp.Body, maxObject))
	if err := dec.Decode(v); err != nil {
		e := &Error{Op: op, Status: resp.StatusCode, msg: "the answer is not the JSON object expected", Err: err,
			RequestID: clean(resp.Header.Get("X-Request-Id"), 100)}
		var ne net.Error
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) {
			// Cut short (the connection dropped): not a wrong answer.
			e.msg, e.cut = "the answer was cut short", true
		}
		return e
	}
	return nil
}

// ceiling is backoff doubled i times, at most maxBackoff (never overflowing).
func ceiling(backoff, maxBackoff time.Duration, i int) time.Duration {
	d := min(backoff, maxBackoff)
	for ; i > 0 && d < maxBackoff; i-- {
		d = min(2*d, maxBackoff)
	}
	return d
}

// retry runs attempt until it succeeds, fails for good, the retries are
// spent or ctx ends. It waits between attempts with exponential backoff and
// full jitter, or what Retry-After asked.
func (c *Client) retry(ctx context.Context, op string, attempt func(context.Context) error) error {
	retries := c.Retries
	switch {
	case retries == 0:
		retries = 4
	case retries < 0:
		retries = 0
	}
	backoff, maxBackoff := c.Backoff, c.MaxBackoff
	if backoff <= 0 {
		backoff = time.Second
	}
	if maxBackoff <= 0 {
		maxBackoff = 30 * time.Second
	}
	for i := 0; ; i++ {
		err := attempt(ctx)
		e, ok := AsError(err)
		if err == nil || !ok || !e.Retryable() || i >= retries || e.RetryAfter > maxBackoff {
			return err
		}
		wait := e.RetryAfter
		if wait == 0 {
			wait = rand.N(ceiling(backoff, maxBackoff, i)) + 1
		}
		if c.Log != nil {
			c.Log.Debug("batch API call retried", "op", op, "cause", e.Error(), "attempt", i+1, "wait", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("batch API %s: %w", op, context.Cause(ctx))
		case <-t.C:
		}
	}
}
