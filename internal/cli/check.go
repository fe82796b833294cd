package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/stage"
)

type checkOptions struct {
	provider       string
	model          string
	endpoint       string
	text           string
	timeout        time.Duration
	connectTimeout time.Duration
	billTo         string
	labels         string
	tokenEnv       string
	constrain      string
	labelList      []string
	flags          *pflag.FlagSet
}

func newCheckCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &checkOptions{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Preflight: one harmless call, then report token, endpoint, status, latency and answer shape",
		Long: `Check sends one short, harmless sample text to the model and reports what a
batch would meet: whether a token was found and where from (never its value),
the endpoint, the HTTP status, the latency, the shape of the answer (nested
[[{label,score}]] as the Hugging Face API sends, or flat [{label,score}]) and
the label. A loading model (503 with an estimated_time) is a normal state:
check waits as long as the API says, asks again, and so on up to --timeout,
then reports "model loading, ready after N s". So is a dedicated endpoint
scaled to zero (a 503 from an endpoint other than the router): check asks
again with X-Scale-Up-Timeout, which makes its proxy hold the call until a
replica is up, within --timeout, and reports "scale-up: ready after N s".

Exit 0 only when the sample got a label, that is when a batch would work;
1 when it would not (no token, token rejected, endpoint unreachable, an answer
that is not a classification, ...); 2 for bad flags.`,
		Example: `  # before a batch in CI
  HF_TOKEN=hf_... hfsent check

  # another model, or a dedicated Inference Endpoint
  hfsent check --model cardiffnlp/twitter-roberta-base-sentiment-latest
  hfsent check --endpoint https://xyz.endpoints.huggingface.cloud --timeout 10m

  # a text-embeddings-inference server
  hfsent check --endpoint http://127.0.0.1:8080/predict`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := g.logger(ios)
			if err != nil {
				return err
			}
			return runCheck(cmd.Context(), o, ios, log)
		},
	}
	fs := cmd.Flags()
	o.flags = fs
	fs.StringVar(&o.provider, "provider", "hf", "hf: the Hugging Face API and servers that read its requests; chat: an OpenAI-compatible Chat Completions endpoint (needs --model and --labels); tei: a text-embeddings-inference server's /predict (an --endpoint ending in /predict is read as tei)")
	fs.StringVar(&o.labels, "labels", "", "comma-separated labels: required with --provider chat; with hf, zero-shot classification")
	fs.StringVar(&o.tokenEnv, "token-env", "", "read the token from this environment variable instead of HF_TOKEN and the token file")
	addConstrainFlag(fs, &o.constrain)
	fs.StringVar(&o.model, "model", provider.DefaultModel, "model id")
	fs.StringVar(&o.endpoint, "endpoint", "", "full http(s) URL to POST to; {model} is replaced\n(default "+provider.DefaultEndpoint+")")
	fs.StringVar(&o.text, "text", provider.SampleText, "the sample text sent")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "the whole call, including waiting for a loading model or a cold endpoint's replica ("+rangeHelp(minTimeout, maxTimeout)+")")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 3*time.Second, "connection set-up ("+rangeHelp(minTimeout, maxConnectTimeout)+")")
	addBillToFlag(fs, &o.billTo)
	return cmd
}

// checkResult is what check found; it prints as "key: value" lines.
type checkResult struct {
	lines [][2]string
}

func (r *checkResult) add(k, v string) { r.lines = append(r.lines, [2]string{k, v}) }

func (r *checkResult) print(w io.Writer) {
	for _, l := range r.lines {
		fmt.Fprintf(w, "%-9s %s\n", l[0]+":", l[1])
	}
}

func runCheck(ctx context.Context, o *checkOptions, ios *IOStreams, log *slog.Logger) error {
	kind, err := o.validate()
	if err != nil {
		return err
	}
	res := &checkResult{}
	defer res.print(ios.Out)

	tok, err := stage.ResolveToken(ios.getenv, o.tokenEnv)
	if !res.token(tok, err, o.endpoint != "", ios.getenv) {
		return silentExit(ExitCheckFailed)
	}
	capture := &captureTransport{rt: provider.NewHTTPClient(1, o.connectTimeout).Transport}
	warm := &warmUp{errOut: ios.ErrOut, timeout: o.timeout}
	guard, info, err := o.guard(kind, tok.Value, capture, warm, log)
	if err != nil {
		return err
	}
	res.add("endpoint", info.URL) // redacted
	if u, err := url.Parse(info.URL); err == nil {
		// Only the sample's answer is reported, not what a chat client
		// asks the server about its context.
		capture.path = u.Path
	}
	if info.API == provider.APITEI {
		res.add("api", "tei (text-embeddings-inference's /predict: batches sent as [[text], ...])")
	}
	res.add("model", o.model)
	if o.billTo != "" {
		res.add("bill to", o.billTo+" (X-HF-Bill-To)")
	}
	if tok.Value == "" && o.endpoint == "" {
		res.add("result", "FAIL: no Hugging Face token: set HF_TOKEN=hf_... or run `hf auth login`; nothing was sent")
		return silentExit(ExitCheckFailed)
	}

	start := time.Now()
	// --timeout bounds the whole check, waits and later attempts included.
	sctx, cancel := context.WithTimeout(ctx, o.timeout)
	ans, err := guard.Classify(sctx, &resilience.Row{WaitForModel: true}, []string{o.text})
	cancel()
	latency := time.Since(start).Round(time.Millisecond)
	status, body := capture.last()
	if status > 0 {
		res.add("status", fmt.Sprintf("%d %s", status, http.StatusText(status)))
	} else {
		res.add("status", "no HTTP answer")
	}
	res.add("latency", latency.String())
	if chat, ok := guard.Client().(*provider.Chat); ok {
		res.chat(chat)
	}
	if !res.answer(o, ans, err, warm.done(), status, body) {
		return silentExit(ExitCheckFailed)
	}
	return nil
}

// validate checks the flags before anything is sent, and returns the kind
// of provider asked.
func (o *checkOptions) validate() (provider.Kind, error) {
	if strings.TrimSpace(o.model) == "" {
		return provider.Kind{}, usageErrorf("--model must not be empty")
	}
	if strings.TrimSpace(o.text) == "" {
		return provider.Kind{}, usageErrorf("--text must not be empty")
	}
	if err := inRange("--timeout", o.timeout, minTimeout, maxTimeout, ""); err != nil {
		return provider.Kind{}, err
	}
	if err := inRange("--connect-timeout", o.connectTimeout, minTimeout, maxConnectTimeout, ""); err != nil {
		return provider.Kind{}, err
	}
	kind, err := stage.CheckKind(o.provider, o.endpoint, true)
	if err != nil {
		return kind, usageError(err)
	}
	if err := stage.CheckBillTo(o.billTo); err != nil {
		return kind, usageError(err)
	}
	if o.flags != nil && o.flags.Changed("labels") {
		var err error
		if o.labelList, err = stage.ParseLabels(o.labels); err != nil {
			return kind, usageError(err)
		}
	}
	if kind.Chat && (len(o.labelList) == 0 || !o.flags.Changed("model")) {
		return kind, usageErrorf("--provider chat needs --model and --labels")
	}
	if o.tokenEnv != "" && !stage.EnvName(o.tokenEnv) {
		return kind, usageErrorf("--token-env %q is not an environment variable name (letters, digits, _)", o.tokenEnv)
	}
	if err := stage.CheckConstrain(o.constrain, o.flags != nil && o.flags.Changed("constrain"), kind.Chat); err != nil {
		return kind, usageError(err)
	}
	if err := stage.CheckEndpoint(o.endpoint, o.model); err != nil {
		return kind, usageError(err)
	}
	return kind, nil
}

// token says where the token was found (never its value); false when it
// cannot be used, and nothing may be sent.
func (r *checkResult) token(tok provider.Token, err error, endpoint bool, getenv func(string) string) bool {
	switch {
	case err != nil:
		r.add("token", "unusable: "+err.Error())
		r.add("result", "FAIL: fix the token; nothing was sent")
		return false
	case tok.Value != "":
		r.add("token", "found ("+tok.Source+")")
	case endpoint:
		r.add("token", "not found (none sent; not required with --endpoint)")
	default:
		where := "HF_TOKEN and " + provider.TokenPath(getenv)
		if provider.TokenPath(getenv) == "" {
			where = "HF_TOKEN only: with HOME unset there is no token file to look for; set HF_TOKEN_PATH"
		}
		r.add("token", "not found (looked in "+where+")")
	}
	return true
}

// guard builds the provider through the one construction every command
// uses, with check's own policies: its sample is asked again only while the
// provider warms up (a loading model, a replica starting), up to --timeout;
// any other answer is what check reports. capture keeps the last answer,
// warm follows the waits.
func (o *checkOptions) guard(kind provider.Kind, token string, capture *captureTransport, warm *warmUp, log *slog.Logger) (*resilience.Guard, provider.Info, error) {
	g, info, err := stage.Build(kind,
		provider.Spec{
			Model:          o.model,
			Endpoint:       o.endpoint,
			Token:          token,
			Concurrency:    1,
			Timeout:        o.timeout,
			ConnectTimeout: o.connectTimeout,
			UserAgent:      "hfsent/" + version + " (check)",
			Client:         &http.Client{Transport: capture},
			BillTo:         o.billTo,
			Labels:         o.labelList,
			Constrain:      o.constrain,
			Logger:         log, // what a chat client learns of its server (a refused constraint)
		},
		resilience.Config{
			Concurrency:   1,
			Retries:       checkRetries,
			WarmUpOnly:    true,
			Timeout:       o.timeout,
			MaxRetryAfter: o.timeout,
			OnRetry:       warm.retry,
		})
	if err != nil {
		return nil, info, usageError(err)
	}
	return g, info, nil
}

// answer reports what the sample got (ans, or err), after the waits of
// load, the last HTTP status and body; false when a batch would not work.
func (r *checkResult) answer(o *checkOptions, ans provider.Answer, err error, load loadWait, status int, body []byte) bool {
	pe, isPE := provider.AsError(err)
	if isPE && pe.Loading {
		r.add("loading", fmt.Sprintf("model still loading after %.1f s", load.waited.Seconds()))
		msg := fmt.Sprintf("the model is still loading at the end of --timeout %s", o.timeout)
		if pe.RetryAfter > 0 {
			msg += fmt.Sprintf(" (the API expects it ready in about %.0f s)", pe.RetryAfter.Seconds())
		}
		r.add("outcome", string(pe.Outcome))
		r.add("result", "FAIL: "+msg+": raise --timeout, or run check again shortly; a batch would wait for it")
		return false
	}
	if isPE && pe.Cold {
		r.add("scale-up", fmt.Sprintf("still answering 503 after %.1f s", load.waited.Seconds()))
		r.add("outcome", string(pe.Outcome))
		r.add("result", fmt.Sprintf("FAIL: %s at the end of --timeout %s: if the endpoint is scaled to zero, a replica can take minutes to start: raise --timeout (e.g. --timeout 10m), or run check again shortly; a batch would wait for it, within --row-deadline", pe.Msg, o.timeout))
		return false
	}
	switch {
	case load.cold:
		r.add("scale-up", fmt.Sprintf("the endpoint answered 503 (scaled to zero?), ready after %.1f s", load.waited.Seconds()))
	case load.seen:
		r.add("loading", fmt.Sprintf("model loading, ready after %.1f s", load.waited.Seconds()))
	}
	if status == http.StatusOK && o.provider != "chat" {
		r.add("shape", shapeLine(body))
	}
	if isPE {
		// What the server said and the id it gave the call: what its
		// support asks for.
		if pe.Reason != "" {
			r.add("reason", strconv.Quote(pe.Reason))
		}
		if pe.RequestID != "" {
			r.add("request", pe.RequestID)
		}
	}
	if err != nil {
		oc, msg := describeFailure(err, o.provider == "chat")
		r.add("outcome", string(oc))
		r.add("result", "FAIL: "+msg)
		return false
	}
	p := ans.Predictions[0]
	switch {
	case math.IsNaN(p.Score) && o.provider == "chat" && o.constrain != "off":
		r.add("label", p.Label+" (no score: the server gave no logprobs, or not every label among the alternatives at the label's token)")
	case math.IsNaN(p.Score):
		r.add("label", p.Label+" (no score: the server gave no logprobs)")
	default:
		r.add("label", fmt.Sprintf("%s (score %.4f)", p.Label, p.Score))
	}
	if u := p.Usage; u.Known {
		r.add("tokens", fmt.Sprintf("%d prompt, %d completion", u.Prompt, u.Completion))
	}
	r.add("result", "ok: a batch would work")
	return true
}

// chat says what the call learned of a chat server: the constraint it
// took (after any refusal) and the context it gives the model.
func (r *checkResult) chat(c *provider.Chat) {
	k := c.Constraint()
	r.add("constrain", k.String()+": "+k.Field())
	switch sc := c.Context(); {
	case sc.Tokens > 0:
		r.add("context", fmt.Sprintf("%d tokens (%s)", sc.Tokens, sc.Source))
	case sc.Source != "":
		r.add("context", "unknown: "+sc.Source+"; a prompt cut to fit is told by its usage alone")
	default:
		r.add("context", "unknown: the server did not answer, so it was not asked")
	}
}

// shapeLine names the shape of a 200's body.
func shapeLine(body []byte) string {
	switch shape := provider.AnswerShape(body); shape {
	case provider.ShapeNested:
		return shape + " ([[{label,score}]], as the Hugging Face API sends)"
	case provider.ShapeFlat:
		return shape + " ([{label,score}] for one text; hfsent reads it too)"
	}
	return "not a classification answer"
}

// checkRetries bounds check's calls: its --timeout, not a count, bounds
// how long it waits for a loading model.
const checkRetries = 1 << 20

// loadWait is what check saw of a loading model or a cold endpoint.
type loadWait struct {
	seen   bool          // the model answered that it was loading
	cold   bool          // the endpoint answered 503: it may be scaled to zero
	waited time.Duration // from that first answer to the last
}

// warmUp follows the guard's waits for a provider warming up (a loading
// model, waited as long as the API says, or a cold endpoint, asked again
// at once with X-Scale-Up-Timeout so that its proxy holds the call until a
// replica is up), and says each on stderr.
type warmUp struct {
	errOut  io.Writer
	timeout time.Duration
	first   time.Time // the first answer waited for
	load    loadWait
}

// retry is the guard's OnRetry: the sample waits wait after pe.
func (w *warmUp) retry(pe *provider.Error, wait time.Duration) {
	if w.first.IsZero() {
		w.first = time.Now()
	}
	if pe.Loading {
		w.load.seen = true
		fmt.Fprintf(w.errOut, "hfsent: model loading, ready in about %.1f s; waiting (up to --timeout %s)\n", wait.Seconds(), w.timeout)
		return
	}
	w.load.cold = true
	fmt.Fprintf(w.errOut, "hfsent: the endpoint answered 503 Service Unavailable: it may be scaled to zero and starting a replica; asking again with X-Scale-Up-Timeout, so that its proxy holds the call until one is up (up to --timeout %s)\n", w.timeout)
}

// done is what was seen, once the sample has its answer.
func (w *warmUp) done() loadWait {
	if !w.first.IsZero() {
		w.load.waited = time.Since(w.first)
	}
	return w.load
}

// describeFailure turns a failed sample into its outcome code and advice,
// for a chat model when chat is set.
func describeFailure(err error, chat bool) (outcome.Code, string) {
	pe, ok := provider.AsError(err)
	if !ok {
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			return outcome.UpstreamTimeout, "no answer within --timeout: raise --timeout if the model is large or loading"
		case errors.Is(err, context.Canceled):
			return outcome.NotAttempted, "interrupted"
		}
		return outcome.UpstreamFailed, "call failed"
	}
	msg := pe.Msg
	advice := pe.Outcome.Advice()
	if chat {
		advice = chatAdvice(pe.Outcome, advice)
	}
	if advice != "" {
		msg += ": " + advice
	}
	return pe.Outcome, msg
}

// captureTransport keeps the status and body of the last answer, so that
// check can name the answer's shape while the real client parses it. The
// body is only inspected, never printed.
type captureTransport struct {
	rt     http.RoundTripper
	path   string // when set, only answers to this path are kept
	mu     sync.Mutex
	status int
	body   []byte
}

func (c *captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if c.path != "" && req.URL.Path != c.path {
		return resp, nil
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 4<<20+1))
	resp.Body.Close()
	c.mu.Lock()
	c.status, c.body = resp.StatusCode, body
	c.mu.Unlock()
	var rest io.Reader = bytes.NewReader(body)
	if rerr != nil {
		rest = io.MultiReader(rest, errReader{rerr})
	}
	resp.Body = io.NopCloser(rest)
	return resp, nil
}

func (c *captureTransport) last() (int, []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status, c.body
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
