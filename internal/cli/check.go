package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

type checkOptions struct {
	model          string
	endpoint       string
	text           string
	timeout        time.Duration
	connectTimeout time.Duration
}

func newCheckCmd(ios *IOStreams) *cobra.Command {
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
then reports "model loading, ready after N s".

Exit 0 only when the sample got a label, that is when a batch would work;
1 when it would not (no token, token rejected, endpoint unreachable, an answer
that is not a classification, ...); 2 for bad flags.`,
		Example: `  # before a batch in CI
  HF_TOKEN=hf_... hfsent check

  # another model, or a dedicated Inference Endpoint
  hfsent check --model cardiffnlp/twitter-roberta-base-sentiment-latest
  hfsent check --endpoint https://xyz.endpoints.huggingface.cloud`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runCheck(cmd.Context(), o, ios)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.model, "model", provider.DefaultModel, "model id")
	fs.StringVar(&o.endpoint, "endpoint", "", "full http(s) URL to POST to; {model} is replaced\n(default "+provider.DefaultEndpoint+")")
	fs.StringVar(&o.text, "text", "The repair was quick and the staff were friendly.", "the sample text sent")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Second, "the whole call, including waiting for a loading model ("+rangeHelp(minTimeout, maxTimeout)+")")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 3*time.Second, "connection set-up ("+rangeHelp(minTimeout, maxConnectTimeout)+")")
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

func runCheck(ctx context.Context, o *checkOptions, ios *IOStreams) error {
	if strings.TrimSpace(o.model) == "" {
		return usageErrorf("--model must not be empty")
	}
	if strings.TrimSpace(o.text) == "" {
		return usageErrorf("--text must not be empty")
	}
	if err := inRange("--timeout", o.timeout, minTimeout, maxTimeout, ""); err != nil {
		return err
	}
	if err := inRange("--connect-timeout", o.connectTimeout, minTimeout, maxConnectTimeout, ""); err != nil {
		return err
	}
	if err := checkEndpoint(o.endpoint, o.model); err != nil {
		return err
	}
	res := &checkResult{}
	defer res.print(ios.Out)

	tok, err := provider.ResolveToken(ios.getenv)
	switch {
	case err != nil:
		res.add("token", "unusable: "+err.Error())
		res.add("result", "FAIL: fix the token; nothing was sent")
		return silentExit(ExitCheckFailed)
	case tok.Value != "":
		res.add("token", "found ("+tok.Source+")")
	case o.endpoint != "":
		res.add("token", "not found (none sent; not required with --endpoint)")
	default:
		where := "HF_TOKEN and " + provider.TokenPath(ios.getenv)
		if provider.TokenPath(ios.getenv) == "" {
			where = "HF_TOKEN only: with HOME unset there is no token file to look for; set HF_TOKEN_PATH"
		}
		res.add("token", "not found (looked in "+where+")")
	}

	capture := &captureTransport{rt: provider.NewHTTPClient(1, o.connectTimeout).Transport}
	hf, err := provider.NewHF(provider.HFConfig{
		Model:          o.model,
		Endpoint:       o.endpoint,
		Token:          tok.Value,
		Concurrency:    1,
		Timeout:        o.timeout,
		ConnectTimeout: o.connectTimeout,
		UserAgent:      "hfsent/" + version + " (check)",
		Client:         &http.Client{Transport: capture},
	})
	if err != nil {
		return usageError(fmt.Errorf("--endpoint %w", err))
	}
	res.add("endpoint", hf.URL()) // redacted
	res.add("model", o.model)
	if tok.Value == "" && o.endpoint == "" {
		res.add("result", "FAIL: no Hugging Face token: set HF_TOKEN=hf_... or run `hf auth login`; nothing was sent")
		return silentExit(ExitCheckFailed)
	}

	start := time.Now()
	ans, load, err := sampleWaiting(ctx, hf, o, ios.ErrOut)
	latency := time.Since(start).Round(time.Millisecond)
	status, body := capture.last()
	if status > 0 {
		res.add("status", fmt.Sprintf("%d %s", status, http.StatusText(status)))
	} else {
		res.add("status", "no HTTP answer")
	}
	res.add("latency", latency.String())
	if pe, ok := provider.AsError(err); ok && pe.Loading {
		res.add("loading", fmt.Sprintf("model still loading after %.1f s", load.waited.Seconds()))
		msg := fmt.Sprintf("the model is still loading at the end of --timeout %s", o.timeout)
		if pe.RetryAfter > 0 {
			msg += fmt.Sprintf(" (the API expects it ready in about %.0f s)", pe.RetryAfter.Seconds())
		}
		res.add("outcome", string(pe.Outcome))
		res.add("result", "FAIL: "+msg+": raise --timeout, or run check again shortly; a batch would wait for it")
		return silentExit(ExitCheckFailed)
	}
	if load.seen {
		res.add("loading", fmt.Sprintf("model loading, ready after %.1f s", load.waited.Seconds()))
	}
	if status == http.StatusOK {
		shape := provider.AnswerShape(body)
		switch shape {
		case provider.ShapeNested:
			shape += " ([[{label,score}]], as the Hugging Face API sends)"
		case provider.ShapeFlat:
			shape += " ([{label,score}]; hfsent reads it too)"
		default:
			shape = "not a classification answer"
		}
		res.add("shape", shape)
	}
	if err != nil {
		oc, msg := describeFailure(err)
		res.add("outcome", string(oc))
		res.add("result", "FAIL: "+msg)
		return silentExit(ExitCheckFailed)
	}
	p := ans.Predictions[0]
	res.add("label", fmt.Sprintf("%s (score %.4f)", p.Label, p.Score))
	res.add("result", "ok: a batch would work")
	return nil
}

// loadWait is what check saw of a loading model.
type loadWait struct {
	seen   bool          // the model answered that it was loading
	waited time.Duration // from that first answer to the last
}

// sampleWaiting sends the sample. A loading model (503 with estimated_time)
// is a normal, waitable state, so as classify's retries do it waits as long
// as the API says and asks again (with X-Wait-For-Model), until --timeout
// from the start is spent; the last answer is returned.
func sampleWaiting(ctx context.Context, hf *provider.HF, o *checkOptions, errOut io.Writer) (provider.Answer, loadWait, error) {
	deadline := time.Now().Add(o.timeout)
	// --timeout bounds the whole check, waits and later attempts included.
	ctx, cancel := context.WithDeadline(provider.WithWaitForModel(ctx), deadline)
	defer cancel()
	var load loadWait
	var first time.Time
	for {
		ans, err := hf.Classify(ctx, []string{o.text})
		pe, ok := provider.AsError(err)
		if !ok || !pe.Loading {
			if load.seen {
				load.waited = time.Since(first)
			}
			return ans, load, err
		}
		if !load.seen {
			load.seen, first = true, time.Now()
		}
		wait := pe.RetryAfter
		if wait <= 0 {
			wait = time.Second
		}
		if left := time.Until(deadline); wait > left {
			load.waited = time.Since(first)
			return ans, load, err
		}
		fmt.Fprintf(errOut, "hfsent: model loading, ready in about %.1f s; waiting (up to --timeout %s)\n", wait.Seconds(), o.timeout)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			load.waited = time.Since(first)
			return ans, load, ctx.Err()
		}
		load.waited = time.Since(first)
	}
}

// describeFailure turns a failed sample into its outcome code and advice.
func describeFailure(err error) (outcome.Code, string) {
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
	switch pe.Outcome {
	case outcome.UpstreamAuth:
		msg += ": check the token (a fine-grained token needs the 'Make calls to Inference Providers' permission)"
	case outcome.UpstreamRateLimited:
		msg += ": the quota is spent for now; a batch would be throttled (see --rps)"
	case outcome.UpstreamRequestRejected:
		msg += ": check --model (is it a text-classification model served by this endpoint?)"
	case outcome.UpstreamTimeout:
		msg += ": raise --timeout if the model is large or loading"
	case outcome.UpstreamPayload:
		msg += ": the endpoint answered, but not with a text classification"
	case outcome.UpstreamFailed:
		msg += ": the endpoint is down or unreachable"
	}
	return pe.Outcome, msg
}

// captureTransport keeps the status and body of the last answer, so that
// check can name the answer's shape while the real client parses it. The
// body is only inspected, never printed.
type captureTransport struct {
	rt     http.RoundTripper
	mu     sync.Mutex
	status int
	body   []byte
}

func (c *captureTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(req)
	if err != nil {
		return nil, err
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
