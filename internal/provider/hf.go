package provider

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/redact"
)

// DefaultModel is the model asked when none is given.
const DefaultModel = "distilbert/distilbert-base-uncased-finetuned-sst-2-english"

// DefaultEndpoint is the serverless router URL; {model} is replaced.
const DefaultEndpoint = "https://router.huggingface.co/hf-inference/models/{model}"

// maxBody bounds how much of an answer is read: a classification answer is a
// few hundred bytes per input, so anything near this is not one.
const maxBody = 4 << 20

// HFConfig configures an HF client.
type HFConfig struct {
	Model    string
	Endpoint string // full URL; "{model}" is replaced; empty means DefaultEndpoint
	Token    string // may be empty with a custom endpoint
	// Concurrency sizes the connection pool: one connection per call in flight.
	Concurrency    int
	Timeout        time.Duration // one attempt, end to end (headers and body)
	ConnectTimeout time.Duration
	UserAgent      string
	// Client overrides the HTTP client (tests); nil builds one from the above.
	Client *http.Client
	// OnCall, if set, is called once per HTTP request sent and again with its
	// result; it feeds counters without the client knowing about them.
	OnCall func(err error, d time.Duration)
}

// HF is the Hugging Face text-classification HTTP client.
type HF struct {
	cfg    HFConfig
	url    string
	host   string // for messages: never the whole URL
	client *http.Client
	labels labelSet
	// headers every call sends, and with X-Wait-For-Model: 1.
	headers, waitHeaders http.Header
}

// labelSet interns labels: a model has a handful, and a million answers
// then share them instead of each holding its own copy.
type labelSet struct {
	m sync.Map
	n atomic.Int32 // labels stored, so that a full set is known without counting it
}

// maxLabels bounds the set, for a model that answers free text as labels.
const maxLabels = 1024

func (s *labelSet) intern(l string) string {
	if v, ok := s.m.Load(l); ok {
		return v.(string)
	}
	if s.n.Load() >= maxLabels {
		return l
	}
	v, loaded := s.m.LoadOrStore(l, l)
	if !loaded {
		s.n.Add(1)
	}
	return v.(string)
}

// NewHTTPClient builds the one shared client: a transport whose pool holds a
// connection per call in flight, an explicit connect timeout, and no overall
// client timeout (each attempt carries its own deadline through its context).
func NewHTTPClient(concurrency int, connectTimeout time.Duration) *http.Client {
	if concurrency < 1 {
		concurrency = 1
	}
	dialer := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          concurrency * 2,
		MaxIdleConnsPerHost:   concurrency,
		MaxConnsPerHost:       concurrency,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   connectTimeout,
		ExpectContinueTimeout: time.Second,
	}
	return &http.Client{Transport: tr}
}

// NewHF returns a client for cfg.
func NewHF(cfg HFConfig) (*HF, error) {
	if cfg.Model == "" {
		cfg.Model = DefaultModel
	}
	target, err := EndpointURL(cfg.Endpoint, cfg.Model)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 12 * time.Second
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 3 * time.Second
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "hfsent"
	}
	c := cfg.Client
	if c == nil {
		c = NewHTTPClient(cfg.Concurrency, cfg.ConnectTimeout)
	}
	host := "the endpoint"
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		host = u.Host
	}
	h := &HF{cfg: cfg, url: target, host: host, client: c}
	h.headers = http.Header{
		"Content-Type": {"application/json"},
		"Accept":       {"application/json"},
		"User-Agent":   {cfg.UserAgent},
	}
	if cfg.Token != "" {
		h.headers.Set("Authorization", "Bearer "+cfg.Token)
	}
	h.waitHeaders = h.headers.Clone()
	h.waitHeaders.Set("X-Wait-For-Model", "1")
	return h, nil
}

// EndpointURL checks an endpoint (empty: DefaultEndpoint) and returns the
// URL to post to for model. It refuses what would fail every call: a string
// net/url cannot parse, a scheme other than http or https, no host, a bad
// port, {model} outside the path and query, a model id that breaks the URL.
// Its errors show the endpoint redacted (package redact), never as given.
func EndpointURL(endpoint, model string) (string, error) {
	ep := endpoint
	if ep == "" {
		ep = DefaultEndpoint
	}
	shown := fmt.Sprintf("%q", redact.URL(ep))
	if scheme, _, ok := strings.Cut(ep, "://"); !ok || !strings.EqualFold(scheme, "http") && !strings.EqualFold(scheme, "https") {
		return "", fmt.Errorf("%s is not an http:// or https:// URL", shown)
	}
	if strings.Contains(authority(ep), "{model}") {
		return "", fmt.Errorf("%s has {model} in its host; {model} may stand only in the path or the query", shown)
	}
	// net/url's own errors quote pieces of the URL (a bad %-escape, a
	// port), which may be pieces of a password: they are not shown.
	if err := checkURL(ep); err != "" {
		return "", fmt.Errorf("%s is not a valid URL: %s", shown, err)
	}
	target := strings.ReplaceAll(ep, "{model}", model)
	if err := checkURL(target); err != "" {
		return "", fmt.Errorf("%s with the model id %q put in for {model} is not a valid URL: %s", shown, model, err)
	}
	return target, nil
}

// checkURL says what is wrong with s as a URL to post to, or "".
func checkURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "check the host, the port, spaces and %-escapes"
	case u.Hostname() == "":
		return "it has no host"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "its port is not between 1 and 65535"
		}
	}
	return ""
}

// authority is the host part of a URL string, userinfo and port included.
func authority(s string) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// Model implements Classifier.
func (h *HF) Model() string { return h.cfg.Model }

// URL is the address the client posts to, with any credential in it
// redacted: it is for showing.
func (h *HF) URL() string { return redact.URL(h.url) }

// payload is the request body: {"inputs": TEXT or [TEXTS], "parameters":
// {"top_k": 1}}, built by hand: a million rows make a million bodies.
func payload(texts []string) ([]byte, error) {
	b := make([]byte, 0, 48+len(texts)*8+totalLen(texts))
	b = append(b, `{"inputs":`...)
	if len(texts) > 1 {
		b = append(b, '[')
	}
	for i, t := range texts {
		if i > 0 {
			b = append(b, ',')
		}
		q, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		b = append(b, q...)
	}
	if len(texts) > 1 {
		b = append(b, ']')
	}
	return append(b, `,"parameters":{"top_k":1}}`...), nil
}

func totalLen(texts []string) int {
	n := 0
	for _, t := range texts {
		n += len(t)
	}
	return n
}

// bodies recycles the buffers answers are read into.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Classify sends one attempt. It never retries.
func (h *HF) Classify(ctx context.Context, texts []string) (Answer, error) {
	if len(texts) == 0 {
		return Answer{}, &Error{Outcome: outcome.InvalidInput, Msg: "no text"}
	}
	body, err := payload(texts)
	if err != nil {
		return Answer{}, &Error{Outcome: outcome.InvalidInput, Msg: "text cannot be encoded", Err: err}
	}
	if err := ctx.Err(); err != nil {
		return Answer{}, err
	}
	timeout := attemptTimeout(ctx, h.cfg.Timeout)
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return Answer{}, &Error{Outcome: outcome.UpstreamFailed, Msg: "bad request URL", Err: err}
	}
	// The headers are the same for every call: built once, shared, never
	// changed (net/http only reads them).
	req.Header = h.headers
	if waitForModel(ctx) {
		req.Header = h.waitHeaders
	}
	if t := TraceFrom(ctx); t != nil {
		t.AddAttempt()
	}
	start := time.Now()
	ans, err := h.do(ctx, actx, req, len(texts), timeout)
	if h.cfg.OnCall != nil {
		h.cfg.OnCall(err, time.Since(start))
	}
	return ans, err
}

func (h *HF) do(ctx, actx context.Context, req *http.Request, n int, timeout time.Duration) (Answer, error) {
	resp, err := h.client.Do(req)
	if err != nil {
		// net/http's *url.Error prints the URL (it hides a password, not a
		// query's api_key); it is kept for errors.As, but redacted.
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redact.URL(ue.URL)
		}
		return Answer{}, h.transportError(ctx, actx, err, timeout)
	}
	defer resp.Body.Close()
	buf := bodies.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 64<<10 { // a rare huge answer is not kept
			bodies.Put(buf)
		}
	}()
	_, err = buf.ReadFrom(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return Answer{}, h.transportError(ctx, actx, err, timeout)
	}
	body := buf.Bytes()
	if resp.StatusCode == http.StatusOK {
		if len(body) > maxBody {
			return Answer{}, &Error{Outcome: outcome.UpstreamPayload, Status: 200, Msg: "answer larger than 4 MiB"}
		}
		preds, err := ParseAnswer(body, n)
		if err != nil {
			return Answer{}, &Error{Outcome: outcome.UpstreamPayload, Status: 200, Msg: "not a classification: " + err.Error()}
		}
		for i := range preds {
			preds[i].Label = h.labels.intern(preds[i].Label)
		}
		return Answer{Predictions: preds, Model: h.cfg.Model}, nil
	}
	return Answer{}, statusError(resp, body, time.Now())
}

// transportError classifies a failure with no HTTP answer. Its message
// names the host and the cause, never the URL (which may carry a
// credential).
func (h *HF) transportError(ctx, actx context.Context, err error, timeout time.Duration) error {
	if ctx.Err() != nil {
		// The row or the run was cancelled: not the provider's fault.
		return ctx.Err()
	}
	if errors.Is(actx.Err(), context.DeadlineExceeded) {
		return &Error{Outcome: outcome.UpstreamTimeout, Msg: fmt.Sprintf("no answer within %s", timeout), Err: err}
	}
	if cause, ok := connectCause(err); ok {
		return &Error{Outcome: outcome.UpstreamFailed, Connect: true,
			Msg: fmt.Sprintf("cannot connect to %s: %s", h.host, cause), Err: err}
	}
	msg := "connection failed"
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		msg = "connection timed out"
	}
	return &Error{Outcome: outcome.UpstreamFailed, Msg: msg + " (" + h.host + ")", Err: err}
}

// connectCause reports whether err is a failure to set up the connection
// (so the request never reached the provider) and names it.
func connectCause(err error) (string, bool) {
	var dns *net.DNSError
	if errors.As(err, &dns) {
		if dns.IsNotFound {
			return "no such host", true
		}
		return "name lookup failed", true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return "connection refused", true
		case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
			return "network unreachable", true
		case op.Timeout():
			return "connect timed out (--connect-timeout)", true
		}
		return "connection failed", true
	}
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &cv), errors.As(err, &ua), errors.As(err, &hn), errors.As(err, &ci):
		return "TLS certificate not accepted", true
	case errors.As(err, &rh):
		return "TLS handshake failed (is it an http:// endpoint?)", true
	}
	return "", false
}

// statusError maps a non-200 answer to the outcome table. The body is read
// only for the loading signal; it is never echoed.
func statusError(resp *http.Response, body []byte, now time.Time) *Error {
	code := resp.StatusCode
	e := &Error{Status: code}
	e.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	if e.RetryAfter == 0 {
		e.RetryAfter = ParseRateLimit(resp.Header.Get("RateLimit"))
	}
	switch {
	case code == 401 || code == 403:
		e.Outcome, e.Msg = outcome.UpstreamAuth, "token rejected"
	case code == 429:
		e.Outcome, e.Msg = outcome.UpstreamRateLimited, "rate limited"
	case code == 402:
		e.Outcome, e.Msg = outcome.UpstreamQuota, "payment required: the account has no credits left"
	case code == 404:
		e.Outcome, e.Msg = outcome.UpstreamNotFound, "not found: no such model at this endpoint"
	case code == 413:
		e.Outcome, e.Msg = outcome.UpstreamRequestRejected, "request too large"
	case code >= 400 && code < 500:
		e.Outcome, e.Msg = outcome.UpstreamRequestRejected, "request rejected"
	case code == 503:
		e.Outcome, e.Msg = outcome.UpstreamFailed, "service unavailable"
		if loading, est := parseLoading(body); loading {
			e.Loading = true
			e.Msg = "model is loading"
			if e.RetryAfter == 0 {
				e.RetryAfter = est
			}
		}
	case code >= 500:
		e.Outcome, e.Msg = outcome.UpstreamFailed, "server error"
	default:
		e.Outcome, e.Msg = outcome.UpstreamFailed, "unexpected status"
	}
	return e
}
