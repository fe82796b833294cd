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
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
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
	// API is the request format the endpoint reads: APIHF or APITEI; ""
	// chooses by the URL (DetectAPI).
	API string
	// BillTo, when set, is sent as X-HF-Bill-To: the organisation that pays
	// for the calls instead of the token's owner.
	BillTo string
	// Logger is told once when an endpoint answers a batch with a flat list
	// (nil: not told).
	Logger *slog.Logger
	// Labels, when set, make the calls zero-shot: the labels are sent as
	// parameters.candidate_labels (APIHF only).
	Labels []string
	// Hypotheses, when set (one per label, in order), are sent as the
	// candidates instead of the labels, with Template as
	// parameters.hypothesis_template when it is not "": a label file's
	// descriptions. An answer's hypothesis is read back as its label.
	Hypotheses []string
	Template   string
	// TopK, when above 1, asks a text-classification model for its TopK
	// best labels (parameters.top_k) where one is asked for by default.
	TopK int
	// MultiLabel asks for every label's own score: a text-classification
	// model's sigmoid scores (parameters.function_to_apply), a zero-shot
	// model's multi_label; Threshold chooses the labels (Choose).
	MultiLabel bool
	Threshold  float64
}

// Request formats, as HFConfig.API names them.
const (
	// APIHF is the Hugging Face inference API's, which the router, the
	// Inference Endpoints' default container and a plain transformers
	// server read: {"inputs": TEXT or [TEXT, ...], "parameters": {...}}.
	APIHF = "hf"
	// APITEI is text-embeddings-inference's /predict: {"inputs": TEXT or
	// [[TEXT], ...], "truncate": true}. TEI reads a flat list of two
	// strings as ONE text pair, so a batch must be a list of lists.
	APITEI = "tei"
	// APIChat is OpenAI's Chat Completions (the chat provider's).
	APIChat = "chat"
)

// DetectAPI is the request format for an endpoint URL: APITEI when its path
// ends in /predict (text-embeddings-inference's route), else APIHF.
func DetectAPI(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && strings.HasSuffix(strings.TrimRight(u.Path, "/"), "/predict") {
		return APITEI
	}
	return APIHF
}

// HF is the Hugging Face text-classification HTTP client.
type HF struct {
	cfg    HFConfig
	url    string
	shown  string // url with its credentials redacted, made once: Request shows it for every row
	host   string // for messages: never the whole URL
	api    string
	client *http.Client
	labels labelSet
	// headers every call sends, and with X-Wait-For-Model: 1.
	headers, waitHeaders http.Header
	// holds: the endpoint is not the router, so it may be scaled to zero,
	// and its proxy then holds a call that carries X-Scale-Up-Timeout until
	// a replica is up (WithScaleUp). served is set by its first 200: a 503
	// before it may be a replica starting (Error.Cold), one after it is not.
	holds  bool
	served atomic.Bool
	flat   sync.Once // the flat-list batch warning
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
		Proxy: http.ProxyFromEnvironment,
		// Every connection can hold a call back at its write (SendGate).
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &gatedConn{Conn: c}, nil
		},
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
	api := cfg.API
	switch api {
	case "":
		api = DetectAPI(target)
	case APIHF, APITEI:
	default:
		return nil, fmt.Errorf("unknown API %q: want %s or %s", api, APIHF, APITEI)
	}
	if len(cfg.Labels) > 0 && api == APITEI {
		return nil, errors.New("cannot be asked with --labels: text-embeddings-inference's /predict takes no candidate labels")
	}
	// A 301, 302 or 303 would turn the POST into a GET (and drop its
	// body): it is not followed but answered, naming where it points. A
	// 307 or 308 keeps the method and the body, and is followed.
	client := *c
	client.CheckRedirect = checkRedirect
	h := &HF{cfg: cfg, url: target, shown: redact.URL(target), host: host, api: api, client: &client, holds: !isRouter(host)}
	h.headers = http.Header{
		"Content-Type": {"application/json"},
		"Accept":       {"application/json"},
		"User-Agent":   {cfg.UserAgent},
	}
	if cfg.Token != "" {
		h.headers.Set("Authorization", "Bearer "+cfg.Token)
	}
	if cfg.BillTo != "" {
		h.headers.Set("X-HF-Bill-To", cfg.BillTo)
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

// API is the request format the client sends: APIHF or APITEI.
func (h *HF) API() string { return h.api }

// URL is the address the client posts to, with any credential in it
// redacted: it is for showing.
func (h *HF) URL() string { return h.shown }

// payload is the request body, built by hand: a million rows make a million
// bodies. APIHF: {"inputs": TEXT or [TEXTS], "parameters": {"top_k": 1,
// "truncation": true}}: transformers' pipeline truncates a text longer than
// the model takes instead of failing on it. APITEI: {"inputs": TEXT or
// [[TEXT], ...], "truncate": true}.
// params are a text-classification request's parameters (APIHF): one
// label by default, the --top-k best, or every label's sigmoid score for
// --multi-label.
func (h *HF) params() string {
	switch {
	case h.cfg.MultiLabel:
		return fmt.Sprintf(`{"function_to_apply":"sigmoid","top_k":%d,"truncation":true}`, maxLabels)
	case h.cfg.TopK > 1:
		return fmt.Sprintf(`{"top_k":%d,"truncation":true}`, h.cfg.TopK)
	}
	return `{"top_k":1,"truncation":true}`
}

func payload(api string, texts []string, params string) ([]byte, error) {
	b := make([]byte, 0, 64+len(texts)*10+totalLen(texts))
	b = append(b, `{"inputs":`...)
	batch := len(texts) > 1
	if batch {
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
		if batch && api == APITEI {
			b = append(b, '[')
			b = append(b, q...)
			b = append(b, ']')
		} else {
			b = append(b, q...)
		}
	}
	if batch {
		b = append(b, ']')
	}
	if api == APITEI {
		return append(b, `,"truncate":true}`...), nil
	}
	b = append(b, `,"parameters":`...)
	b = append(b, params...)
	return append(b, '}'), nil
}

func totalLen(texts []string) int {
	n := 0
	for _, t := range texts {
		n += len(t)
	}
	return n
}

// body is the request body for texts: zero-shot with --labels, else the
// API's text-classification payload.
func (h *HF) body(texts []string) ([]byte, error) {
	if len(h.cfg.Labels) > 0 {
		return zeroShotPayload(texts, h.candidates(), h.cfg.Template, h.cfg.MultiLabel)
	}
	return payload(h.api, texts, h.params())
}

// candidates are the zero-shot candidates sent: the hypotheses, else the
// labels.
func (h *HF) candidates() []string {
	if len(h.cfg.Hypotheses) == len(h.cfg.Labels) && len(h.cfg.Hypotheses) > 0 {
		return h.cfg.Hypotheses
	}
	return h.cfg.Labels
}

// labelsOfHypotheses reads each prediction's hypothesis back as its label.
func (h *HF) labelsOfHypotheses(preds []Prediction) {
	if len(h.cfg.Hypotheses) != len(h.cfg.Labels) || len(h.cfg.Hypotheses) == 0 {
		return
	}
	for i := range preds {
		if j := slices.Index(h.cfg.Hypotheses, preds[i].Label); j >= 0 {
			preds[i].Label = h.cfg.Labels[j]
		}
		for k, s := range preds[i].Scores {
			if j := slices.Index(h.cfg.Hypotheses, s.Label); j >= 0 {
				preds[i].Scores[k].Label = h.cfg.Labels[j]
			}
		}
	}
}

// Request implements Requester: the body a call for text alone would send.
func (h *HF) Request(text string) (string, []byte, error) {
	b, err := h.body([]string{text})
	return h.URL(), b, err
}

// bodies recycles the buffers answers are read into.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// Classify sends one attempt. It never retries.
func (h *HF) Classify(ctx context.Context, call Call) (Answer, error) {
	texts := call.Texts
	if len(texts) == 0 {
		return Answer{}, &Error{Outcome: outcome.InvalidInput, Msg: "no text"}
	}
	body, err := h.body(texts)
	if err != nil {
		return Answer{}, &Error{Outcome: outcome.InvalidInput, Msg: "text cannot be encoded", Err: err}
	}
	if err := ctx.Err(); err != nil {
		return Answer{}, err
	}
	timeout := call.attemptTimeout(h.cfg.Timeout)
	// The headers are the same for every call: built once, shared, never
	// changed (net/http only reads them).
	header := h.headers
	if call.WaitForModel {
		header = h.waitHeaders
	}
	if h.holds && call.ScaleUp {
		// The endpoint answered 503 and may be starting a replica: its
		// proxy holds the call until one is up when asked to, and the
		// call may take that long, within the row's deadline.
		hold := maxScaleUpWait
		if dl, ok := ctx.Deadline(); ok {
			hold = time.Until(dl)
		}
		timeout = max(timeout, hold)
		header = header.Clone()
		header.Set("X-Scale-Up-Timeout", strconv.Itoa(max(1, int(hold/time.Second))))
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return Answer{}, &Error{Outcome: outcome.UpstreamFailed, Msg: "bad request URL", Err: err}
	}
	req.Header = header
	return h.do(ctx, actx, req, len(texts), timeout)
}

// exchange sends req and reads the answer, at most maxBody+1 bytes, into a
// recycled buffer; release gives the buffer back once it is no longer
// read. An error is net/http's, for the caller to classify
// (transportError).
func (h *HF) exchange(req *http.Request) (resp *http.Response, buf *bytes.Buffer, release func(), err error) {
	resp, err = h.client.Do(gated(req))
	if err != nil {
		// net/http's *url.Error prints the URL (it hides a password, not a
		// query's api_key); it is kept for errors.As, but redacted.
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = redact.URL(ue.URL)
		}
		return nil, nil, nil, err
	}
	defer resp.Body.Close()
	buf = bodies.Get().(*bytes.Buffer)
	buf.Reset()
	release = func() {
		if buf.Cap() <= 64<<10 { // a rare huge answer is not kept
			bodies.Put(buf)
		}
	}
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, maxBody+1)); err != nil {
		release()
		return nil, nil, nil, err
	}
	return resp, buf, release, nil
}

func (h *HF) do(ctx, actx context.Context, req *http.Request, n int, timeout time.Duration) (Answer, error) {
	resp, buf, release, err := h.exchange(req)
	if err != nil {
		return Answer{}, h.transportError(ctx, actx, err, timeout)
	}
	defer release()
	body := buf.Bytes()
	if resp.StatusCode == http.StatusOK {
		if len(body) > maxBody {
			return Answer{}, &Error{Outcome: outcome.UpstreamPayload, Status: 200, Msg: "answer larger than 4 MiB"}
		}
		h.served.Store(true)
		var preds []Prediction
		if len(h.cfg.Labels) > 0 {
			preds, err = ParseZeroShot(body, n, h.candidates())
			h.labelsOfHypotheses(preds)
			if h.cfg.MultiLabel {
				chooseMulti(preds, h.cfg.Labels, h.cfg.Threshold)
			}
		} else {
			preds, err = ParseAnswer(body, n)
			if h.cfg.MultiLabel {
				// A model's own labels: in the order of their names.
				chooseMulti(preds, nil, h.cfg.Threshold)
			}
		}
		if err != nil {
			if errors.Is(err, ErrFlatBatch) && h.cfg.Logger != nil {
				h.flat.Do(func() {
					h.cfg.Logger.Warn(fmt.Sprintf("%s answered a batch of %d texts with one flat list of labels, which answers one text, not %d "+
						"(a text-embeddings-inference server reads [\"a\", \"b\"] as one pair of texts); such batches are split and each text sent alone. "+
						"For a TEI server use --provider tei, which sends its batch form", h.host, n, n))
				})
			}
			return Answer{}, &Error{Outcome: outcome.UpstreamPayload, Status: 200, Msg: "not a classification: " + err.Error()}
		}
		for i := range preds {
			preds[i].Label = h.labels.intern(preds[i].Label)
			for k := range preds[i].Scores {
				preds[i].Scores[k].Label = h.labels.intern(preds[i].Scores[k].Label)
			}
		}
		return Answer{Predictions: preds, Model: h.cfg.Model}, nil
	}
	return Answer{}, h.statusError(resp, body, time.Now())
}

// transportError classifies a failure with no HTTP answer. Its message
// names the host and the cause, never the URL (which may carry a
// credential).
func (h *HF) transportError(ctx, actx context.Context, err error, timeout time.Duration) error {
	if errors.Is(err, errRedirects) {
		// The client's own refusal (CheckRedirect), not the network's.
		return &Error{Outcome: outcome.UpstreamEndpoint,
			Msg: fmt.Sprintf("%s redirects more than %d times; set --endpoint to where it ends", h.host, maxRedirects), Err: err}
	}
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
// for the loading signal and the server's reason, which is kept summarised
// (never the body itself).
func (h *HF) statusError(resp *http.Response, body []byte, now time.Time) *Error {
	code := resp.StatusCode
	e := &Error{Status: code, RequestID: requestID(resp.Header)}
	e.RetryAfter = ParseRetryAfter(resp.Header.Get("Retry-After"), now)
	if e.RetryAfter == 0 {
		e.RetryAfter = ParseRateLimit(resp.Header.Get("RateLimit"))
	}
	if code < 300 || code >= 400 {
		e.Reason = summarise(serverReason(resp.Header, body), h.cfg.Token)
	}
	switch {
	case code >= 300 && code < 400:
		e.Outcome, e.Msg = outcome.UpstreamEndpoint, redirectMsg(resp)
	case code == 401 || code == 403:
		e.Outcome, e.Msg = outcome.UpstreamAuth, "token rejected"
	case code == 429:
		e.Outcome, e.Msg = outcome.UpstreamRateLimited, "rate limited"
	case code == 402:
		e.Outcome, e.Msg = outcome.UpstreamQuota, "payment required"
		if e.Reason == "" {
			e.Msg += ": the account cannot pay for this call (no credits left, or pay-as-you-go is off)"
		}
	case code == 404:
		e.Outcome, e.Msg = outcome.UpstreamNotFound, "not found: no such model at this endpoint"
	case code == 405:
		e.Outcome, e.Msg = outcome.UpstreamEndpoint, "method not allowed: the endpoint takes no POST there"
	case code == 410:
		e.Outcome, e.Msg = outcome.UpstreamEndpoint, "gone: the endpoint no longer exists"
	case code == 408:
		e.Outcome, e.Msg = outcome.UpstreamTimeout, "request timeout"
	case code == 413:
		e.Outcome, e.Msg = outcome.UpstreamRequestRejected, "request too large"
	case code == 424:
		e.Outcome, e.Msg = outcome.UpstreamFailed, "failed dependency: the server's backend failed"
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
		// A scaled-to-zero Inference Endpoint answers 503 while a replica
		// starts: ask again, asking its proxy to hold the call. Once it
		// has answered, a 503 is an ordinary failure.
		e.Cold = h.holds && !h.served.Load()
	case code >= 500:
		e.Outcome, e.Msg = outcome.UpstreamFailed, "server error"
	default:
		e.Outcome, e.Msg = outcome.UpstreamFailed, "unexpected status"
	}
	return e
}

// maxScaleUpWait bounds how long a call to a cold endpoint may be held when
// the row has no deadline.
const maxScaleUpWait = 10 * time.Minute

// maxRedirects is how many 307/308 redirects a call follows.
const maxRedirects = 10

var errRedirects = errors.New("too many redirects")

// checkRedirect follows a 307 or 308, which keep the method and the body,
// and answers any other redirect as it is (a 301, 302 or 303 would make the
// POST a GET): statusError names where it points.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if req.Response == nil {
		return http.ErrUseLastResponse
	}
	switch req.Response.StatusCode {
	case http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		if len(via) >= maxRedirects {
			return errRedirects
		}
		return nil
	}
	return http.ErrUseLastResponse
}

// redirectMsg says where a redirect that is not followed points, with any
// credential in that URL redacted.
func redirectMsg(resp *http.Response) string {
	where := "another URL"
	if loc, err := resp.Location(); err == nil {
		where = redact.URL(loc.String())
	}
	return fmt.Sprintf("redirected to %s; not followed, as the POST would become a GET there: set --endpoint to that URL", where)
}

// isRouter reports whether host is Hugging Face's serverless router (or its
// older names), which never scales a model to zero behind a proxy that
// holds calls.
func isRouter(host string) bool {
	h := strings.ToLower(host)
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	return h == "router.huggingface.co" || h == "api-inference.huggingface.co" || h == "huggingface.co"
}
