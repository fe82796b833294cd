package cli

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
)

// providerOptions are the provider and limit flags that classify, serve and
// worker share.
type providerOptions struct {
	provider       string
	model          string
	endpoint       string
	concurrency    int
	adaptive       bool
	admissionWait  time.Duration
	rps            float64
	burst          int
	timeout        time.Duration
	connectTimeout time.Duration
	rowDeadline    time.Duration
	retries        int

	breakerThreshold float64
	breakerWindow    time.Duration
	breakerMinCalls  int
	breakerCooldown  time.Duration
	fallbackModel    string
	billTo           string

	// flags tells which flags were given (for --provider local's warning).
	flags *pflag.FlagSet
}

func addProviderFlags(fs *pflag.FlagSet, o *providerOptions) {
	o.flags = fs
	fs.StringVar(&o.provider, "provider", "hf", "hf: the Hugging Face API and servers that read its requests (needs a token unless --endpoint is set); tei: a text-embeddings-inference server's /predict (needs --endpoint; an --endpoint ending in /predict is read as tei); local: the embedded offline model, no network, no token")
	fs.StringVar(&o.model, "model", provider.DefaultModel, "model id")
	fs.StringVar(&o.endpoint, "endpoint", "", "full http(s) URL to POST to, e.g. a dedicated Inference Endpoint or a local server; {model} is replaced\n(default "+provider.DefaultEndpoint+")")
	fs.IntVarP(&o.concurrency, "concurrency", "c", 8, "calls in flight at most; a row waiting for a retry holds no slot ("+rangeHelp(1, maxConcurrency)+"; with --batch-size, at most "+show(maxTextsInFlight)+" texts in flight)")
	fs.BoolVar(&o.adaptive, "adaptive", false, "find the provider's real capacity below --concurrency (lowers on 429s, and on timeouts when they are widespread; raises on success)")
	fs.DurationVar(&o.admissionWait, "admission-wait", 0, "how long a row may wait for a free slot, from when it is read; past it the row is local_capacity and not sent (0: wait as long as needed, up to "+show(maxAdmissionWait)+"; meant for bursts, leave 0 for batches)")
	fs.Float64Var(&o.rps, "rps", 0, "provider calls per second, retries included (0: no limit, else "+rangeHelp(minRPS, maxRPS)+")")
	fs.IntVar(&o.burst, "burst", 1, "calls allowed at once above --rps ("+rangeHelp(1, maxBurst)+")")
	fs.DurationVar(&o.timeout, "timeout", 12*time.Second, "one attempt, end to end ("+rangeHelp(minTimeout, maxTimeout)+")")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 3*time.Second, "connection set-up ("+rangeHelp(minTimeout, maxConnectTimeout)+")")
	fs.DurationVar(&o.rowDeadline, "row-deadline", 10*time.Minute, "all attempts and waits of one row (a call to an endpoint scaled to zero may wait for its replica that long); past it the row ends with its last outcome, or circuit_open ("+rangeHelp(minTimeout, maxRowDeadline)+")")
	fs.IntVar(&o.retries, "retries", 4, "retries after a failure that may recover (connection errors, timeouts, 408, 429, 424, 500/502/503/504, 520-524), with exponential backoff and jitter (longer after a 429 that gives no time), honouring Retry-After and the Hub's RateLimit reset up to --row-deadline; a row is sent at most N+1 times in all ("+rangeHelp(0, maxRetries)+")")
	fs.Float64Var(&o.breakerThreshold, "breaker-threshold", 0.3, "failure rate that opens the circuit breaker (5xx, timeouts, connection errors count, a row's repeated failures once; 429 and 4xx do not) ("+rangeHelp(minThreshold, 1.0)+")")
	fs.DurationVar(&o.breakerWindow, "breaker-window", 60*time.Second, "window over which the failure rate is measured ("+rangeHelp(minBreakerWindow, maxBreakerWindow)+")")
	fs.IntVar(&o.breakerMinCalls, "breaker-min-calls", 20, "calls in the window before the rate counts ("+rangeHelp(1, maxMinCalls)+")")
	fs.DurationVar(&o.breakerCooldown, "breaker-cooldown", 60*time.Second, "time the breaker stays open before a probe ("+rangeHelp(minTimeout, maxCooldown)+")")
	fs.StringVar(&o.fallbackModel, "fallback-model", "", "model id, or local, that answers rows while the breaker is open, and rows whose last call failed as it opened (default: none, rows wait for recovery)")
	addBillToFlag(fs, &o.billTo)
}

// addBillToFlag adds --bill-to, which classify, serve, worker and check take.
func addBillToFlag(fs *pflag.FlagSet, v *string) {
	fs.StringVar(v, "bill-to", "", "bill the calls to this organisation (sent as X-HF-Bill-To) instead of the token's owner; it must be one you belong to, with billing set up")
}

// checkBillTo refuses an --bill-to that is no organisation name: it goes
// into a header as it is.
func checkBillTo(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 96 {
		return usageErrorf("--bill-to must be an organisation name of at most 96 characters, got %d", len(v))
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return usageErrorf("--bill-to %q: an organisation name has only letters, digits, '-', '_' and '.'", v)
		}
	}
	return nil
}

// hfOnlyFlags are the provider flags that only the Hugging Face client and
// the policies around it read: --provider local ignores them.
var hfOnlyFlags = []string{"model", "endpoint", "adaptive", "rps", "burst", "timeout", "connect-timeout", "retries",
	"breaker-threshold", "breaker-window", "breaker-min-calls", "breaker-cooldown", "fallback-model", "bill-to"}

// ignoredFlags lists the flags given on the command line that this run
// ignores.
func (o *providerOptions) ignoredFlags() []string {
	if o.provider != "local" || o.flags == nil {
		return nil
	}
	var out []string
	for _, name := range hfOnlyFlags {
		if o.flags.Changed(name) {
			out = append(out, "--"+name)
		}
	}
	return out
}

// checkEndpoint refuses an --endpoint or a --model that make no URL (hf
// provider): the endpoint first, with a harmless model id, then the model
// put in it, so that the message blames the flag that is wrong.
func checkEndpoint(endpoint, model string) error {
	if _, err := provider.EndpointURL(endpoint, "model"); err != nil {
		return usageError(fmt.Errorf("--endpoint %w", err))
	}
	if _, err := provider.EndpointURL(endpoint, model); err != nil {
		return usageError(fmt.Errorf("--model: %w", err))
	}
	return nil
}

// validate checks the flags before anything is opened or sent.
func (o *providerOptions) validate() error {
	switch o.provider {
	case "hf", "local":
	case provider.APITEI:
		if o.endpoint == "" {
			return usageErrorf("--provider tei needs --endpoint: the URL of the server's /predict, e.g. http://127.0.0.1:8080/predict")
		}
	default:
		return usageErrorf("--provider %q: want hf, tei or local", o.provider)
	}
	if err := checkBillTo(o.billTo); err != nil {
		return err
	}
	if strings.TrimSpace(o.model) == "" {
		return usageErrorf("--model must not be empty")
	}
	for _, err := range []error{
		inRange("--concurrency", o.concurrency, 1, maxConcurrency, ""),
		inRange("--admission-wait", o.admissionWait, 0, maxAdmissionWait, ""),
		inRange("--timeout", o.timeout, minTimeout, maxTimeout, ""),
		inRange("--connect-timeout", o.connectTimeout, minTimeout, maxConnectTimeout, ""),
		inRange("--row-deadline", o.rowDeadline, minTimeout, maxRowDeadline, ""),
		inRange("--rps", o.rps, minRPS, maxRPS, "no limit"),
		inRange("--burst", o.burst, 1, maxBurst, ""),
		inRange("--retries", o.retries, 0, maxRetries, ""),
		inRange("--breaker-threshold", o.breakerThreshold, minThreshold, 1, ""),
		inRange("--breaker-window", o.breakerWindow, minBreakerWindow, maxBreakerWindow, ""),
		inRange("--breaker-min-calls", o.breakerMinCalls, 1, maxMinCalls, ""),
		inRange("--breaker-cooldown", o.breakerCooldown, minTimeout, maxCooldown, ""),
	} {
		if err != nil {
			return err
		}
	}
	if fb := strings.TrimSpace(o.fallbackModel); o.fallbackModel != "" && (fb == "" || fb == o.model) {
		return usageErrorf("--fallback-model must name another model (or local), got %q", o.fallbackModel)
	}
	if o.provider != "local" {
		if err := checkEndpoint(o.endpoint, o.model); err != nil {
			return err
		}
		if fb := strings.TrimSpace(o.fallbackModel); fb != "" && fb != "local" {
			if _, err := provider.EndpointURL(o.fallbackEndpoint(), fb); err != nil {
				return usageError(fmt.Errorf("--fallback-model: %w", err))
			}
		}
	}
	return nil
}

// build makes the classifier chain: the provider client, wrapped by the
// policies the flags ask for (internal/resilience: a *resilience.Guard),
// which report into counters (nil: not reported). tune, if any, adjust the
// policies' configuration before they are built (hooks, a command's own
// defaults). With --provider local the embedded model is returned alone.
func (o *providerOptions) build(ios *IOStreams, log *slog.Logger, counters *resilience.Counters, tune ...func(*resilience.Config)) (provider.Classifier, error) {
	if o.provider == "local" {
		if ignored := o.ignoredFlags(); len(ignored) > 0 {
			log.Warn("--provider local ignores " + strings.Join(ignored, ", ") + ": they apply to the Hugging Face API only")
		}
		return provider.NewLocal(), nil
	}
	tok, err := provider.ResolveToken(ios.getenv)
	if err != nil {
		return nil, usageError(err)
	}
	if tok.Value == "" && o.endpoint == "" {
		login := "run `hf auth login`, which writes " + provider.TokenPath(ios.getenv)
		if provider.TokenPath(ios.getenv) == "" {
			login = "run `hf auth login` and set HF_TOKEN_PATH to the file it writes: with HOME unset there is no token file to look for"
		}
		return nil, usageErrorf("no Hugging Face token: set HF_TOKEN=hf_... (or %s), or use --provider local to run offline", login)
	}
	hf, err := provider.NewHF(provider.HFConfig{
		Model:          o.model,
		Endpoint:       o.endpoint,
		Token:          tok.Value,
		Concurrency:    o.concurrency,
		Timeout:        o.timeout,
		ConnectTimeout: o.connectTimeout,
		UserAgent:      "hfsent/" + version,
		API:            o.api(),
		BillTo:         o.billTo,
		Logger:         log,
	})
	if err != nil {
		return nil, usageError(fmt.Errorf("--endpoint %w", err))
	}
	if o.provider == "hf" && hf.API() == provider.APITEI {
		log.Info("--endpoint ends in /predict: sending text-embeddings-inference's requests (as --provider tei)")
	}
	log.Debug("provider", "url", hf.URL(), "api", hf.API(), "token", tok.String())
	fb, err := o.buildFallback(tok.Value)
	if err != nil {
		return nil, err
	}
	cfg := resilience.Config{
		Retries: o.retries,
		// A Retry-After or a RateLimit reset is honoured up to the row's
		// deadline (and a shared pause lasts that long at most).
		MaxRetryAfter:    max(o.rowDeadline, time.Minute),
		RPS:              o.rps,
		Burst:            o.burst,
		Adaptive:         o.adaptive,
		Concurrency:      o.concurrency,
		Timeout:          o.timeout,
		BreakerThreshold: o.breakerThreshold,
		BreakerWindow:    o.breakerWindow,
		BreakerMinCalls:  o.breakerMinCalls,
		BreakerCooldown:  o.breakerCooldown,
		Fallback:         fb,
		Logger:           log,
		Counters:         counters,
	}
	for _, t := range tune {
		t(&cfg)
	}
	return resilience.Build(hf, cfg), nil
}

// api is the request format --provider asks for ("": chosen by the URL).
func (o *providerOptions) api() string {
	if o.provider == provider.APITEI {
		return provider.APITEI
	}
	return ""
}

// fallbackAPI is the request format of the fallback's endpoint: the
// router's when it is asked there, else what --provider says.
func fallbackAPI(endpoint, api string) string {
	if endpoint == "" {
		return provider.APIHF
	}
	return api
}

// fallbackEndpoint is where --fallback-model is asked: --endpoint when it
// has {model}, else the default router ("").
func (o *providerOptions) fallbackEndpoint() string {
	if strings.Contains(o.endpoint, "{model}") {
		return o.endpoint
	}
	return ""
}

// buildFallback makes the --fallback-model client: the embedded model, or
// another model on the same API (a fixed --endpoint without {model} cannot
// name another model, so the default router is used then).
func (o *providerOptions) buildFallback(token string) (provider.Classifier, error) {
	switch id := strings.TrimSpace(o.fallbackModel); id {
	case "":
		return nil, nil
	case "local":
		return provider.NewLocal(), nil
	default:
		ep := o.fallbackEndpoint()
		if ep == "" && token == "" {
			return nil, usageErrorf("--fallback-model %s is asked on the Hugging Face API, which needs a token; set HF_TOKEN, use --fallback-model local, or an --endpoint with {model}", id)
		}
		fb, err := provider.NewHF(provider.HFConfig{
			Model:          id,
			Endpoint:       ep,
			Token:          token,
			Concurrency:    o.concurrency,
			Timeout:        o.timeout,
			ConnectTimeout: o.connectTimeout,
			UserAgent:      "hfsent/" + version,
			API:            fallbackAPI(ep, o.api()),
			BillTo:         o.billTo,
		})
		if err != nil {
			return nil, usageError(fmt.Errorf("--fallback-model: %w", err))
		}
		return fb, nil
	}
}
