package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/budget"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/spend"
)

// providerOptions are the provider and limit flags that classify, serve and
// worker share. Every command builds its provider from them, or (check)
// from its own, through one place: open, then openGuard.
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
	// rateLimitWait bounds a row's retries after rate limits by time
	// (providerUse.rateLimitWait).
	rateLimitWait time.Duration

	breakerThreshold float64
	breakerWindow    time.Duration
	breakerMinCalls  int
	breakerCooldown  time.Duration
	fallbackModel    string
	fallbackEP       string
	billTo           string
	// lab: --labels, --prompt-file, --token-env, --tpm (chat.go).
	lab labelOptions

	// budget is --budget and --budget-lease; member, when set (joinBudget),
	// bounds the guard open builds and is started with it.
	budget budgetOptions
	member *budget.Member
	// ledger, when set, is what the calls are charged to; a budget member
	// reports it to the fleet (joinBudget).
	ledger *spend.Ledger

	// flags tells which flags were given.
	flags *pflag.FlagSet
}

// providerUse is how a command registers the provider flags: the defaults
// and help that differ between a batch (classify, worker) and a server.
type providerUse struct {
	admissionWait     time.Duration
	admissionWaitHelp string
	retries           int
	retriesHelp       string
	fallbackHelp      string
	// noRowDeadline: the command bounds a row with a flag of its own, so
	// --row-deadline is hidden (and refused).
	noRowDeadline bool
	// rateLimitWait, when set, is how long a row refused for rate limits
	// is asked again, whatever --retries (resilience.Config.RateLimitWait):
	// a batch's rows outlast a provider's rate limit; a server's callers
	// wait, so it counts them as retries.
	rateLimitWait time.Duration
}

// batchProvider is classify's and the worker's use of the provider flags.
var batchProvider = providerUse{
	admissionWaitHelp: "how long a row may wait for a free slot, from when it is read; past it the row is local_capacity and not sent (0: wait as long as needed, up to " + show(maxAdmissionWait) + "; meant for bursts, leave 0 for batches)",
	retries:           4,
	retriesHelp:       "retries after a failure that may recover (connection errors, timeouts, 408, 424, 500/502/503/504, 520-524), with exponential backoff and jitter, honouring Retry-After and the Hub's RateLimit reset up to --row-deadline; a row is sent at most N+1 times for them. Rate limits (429, a busy server) are retried by time instead: for up to " + show(RateLimitWait) + " from a row's first, within --row-deadline, each wait what the provider asked and at least twice the last (0: no retry at all, 429s included) (" + rangeHelp(0, maxRetries) + ")",
	rateLimitWait:     RateLimitWait,
	fallbackHelp:      "model id, or local, that answers rows while the breaker is open, and rows whose last call failed as it opened (default: none, rows wait for recovery)",
}

// RateLimitWait is how long a batch's row refused for rate limits is asked
// again, from its first refusal (within --row-deadline).
const RateLimitWait = 2 * time.Minute

// providerHelp is --provider's help: the kinds (provider.Kinds) and what
// each needs.
const providerHelp = "hf: the Hugging Face API and servers that read its requests (needs a token unless --endpoint is set); chat: an OpenAI-compatible Chat Completions endpoint (default " + provider.DefaultChatEndpoint + ") asked to answer with one of --labels; tei: a text-embeddings-inference server's /predict (needs --endpoint; an --endpoint ending in /predict is read as tei); local: the embedded offline model, no network, no token"

func addProviderFlags(fs *pflag.FlagSet, o *providerOptions, use providerUse) {
	o.flags = fs
	o.rateLimitWait = use.rateLimitWait
	fs.StringVar(&o.provider, "provider", "hf", providerHelp)
	fs.StringVar(&o.model, "model", provider.DefaultModel, "model id")
	fs.StringVar(&o.endpoint, "endpoint", "", "full http(s) URL to POST to, e.g. a dedicated Inference Endpoint or a local server; {model} is replaced\n(default "+provider.DefaultEndpoint+")")
	fs.IntVarP(&o.concurrency, "concurrency", "c", 8, "calls in flight at most; a row waiting for a retry holds no slot ("+rangeHelp(1, maxConcurrency)+"; with --batch-size, at most "+show(maxTextsInFlight)+" texts in flight)")
	fs.BoolVar(&o.adaptive, "adaptive", false, "find the provider's real capacity below --concurrency (lowers on 429s, and on timeouts when they are widespread; raises on success)")
	fs.DurationVar(&o.admissionWait, "admission-wait", use.admissionWait, use.admissionWaitHelp)
	fs.Float64Var(&o.rps, "rps", 0, "provider calls per second, retries included (0: no limit, else "+rangeHelp(minRPS, maxRPS)+")")
	fs.IntVar(&o.burst, "burst", 1, "calls allowed at once above --rps ("+rangeHelp(1, maxBurst)+")")
	fs.DurationVar(&o.timeout, "timeout", 12*time.Second, "one attempt, end to end ("+rangeHelp(minTimeout, maxTimeout)+")")
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 3*time.Second, "connection set-up ("+rangeHelp(minTimeout, maxConnectTimeout)+")")
	fs.DurationVar(&o.rowDeadline, "row-deadline", 10*time.Minute, "all attempts and waits of one row (a call to an endpoint scaled to zero may wait for its replica that long); past it the row ends with its last outcome, or circuit_open ("+rangeHelp(minTimeout, maxRowDeadline)+")")
	if use.noRowDeadline {
		_ = fs.MarkHidden("row-deadline")
	}
	fs.IntVar(&o.retries, "retries", use.retries, use.retriesHelp)
	fs.Float64Var(&o.breakerThreshold, "breaker-threshold", 0.3, "failure rate that opens the circuit breaker (5xx, timeouts, connection errors count, a row's repeated failures once; 429 and 4xx do not) ("+rangeHelp(minThreshold, 1.0)+")")
	fs.DurationVar(&o.breakerWindow, "breaker-window", 60*time.Second, "window over which the failure rate is measured ("+rangeHelp(minBreakerWindow, maxBreakerWindow)+")")
	fs.IntVar(&o.breakerMinCalls, "breaker-min-calls", 20, "calls in the window before the rate counts ("+rangeHelp(1, maxMinCalls)+")")
	fs.DurationVar(&o.breakerCooldown, "breaker-cooldown", 60*time.Second, "time the breaker stays open before a probe ("+rangeHelp(minTimeout, maxCooldown)+")")
	fs.StringVar(&o.fallbackModel, "fallback-model", "", use.fallbackHelp+"; chat:MODEL asks a chat model (at "+provider.DefaultChatEndpoint+", or --endpoint when the primary is chat) with the primary's labels, hf:MODEL a model of the Hugging Face API")
	fs.StringVar(&o.fallbackEP, "fallback-endpoint", "", "where --fallback-model is asked, e.g. a local vLLM's http://127.0.0.1:8000/v1/chat/completions for chat:MODEL (default: --endpoint when the fallback is of the primary's kind and the endpoint can name it, else the kind's default endpoint)")
	addBillToFlag(fs, &o.billTo)
	addLabelFlags(fs, &o.lab)
	addBudgetFlags(fs, &o.budget)
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

// remoteFlags are the provider flags that only a remote provider (HTTP)
// and the policies around it read: --provider local ignores them.
var remoteFlags = []string{"model", "endpoint", "adaptive", "rps", "burst", "timeout", "connect-timeout", "retries",
	"breaker-threshold", "breaker-window", "breaker-min-calls", "breaker-cooldown", "fallback-model", "fallback-endpoint", "bill-to",
	"labels", "prompt-file", "token-env", "tpm", "constrain"}

// ignoredFlags lists the flags given on the command line that this run
// ignores.
func (o *providerOptions) ignoredFlags() []string {
	if k, _ := provider.KindOf(o.provider); k.Remote || o.flags == nil {
		return nil
	}
	var out []string
	for _, name := range remoteFlags {
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

// checkKind refuses a --provider that is no kind (remote only: one that
// check can ask), or one that needs --endpoint without it.
func checkKind(name, endpoint string, remoteOnly bool) (provider.Kind, error) {
	var names []string
	for _, k := range provider.Kinds() {
		if k.Remote || !remoteOnly {
			names = append(names, k.Name)
		}
	}
	k, ok := provider.KindOf(name)
	switch {
	case !ok || remoteOnly && !k.Remote:
		want := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
		if remoteOnly {
			want += " (check asks an HTTP endpoint)"
		}
		return k, usageErrorf("--provider %q: want %s", name, want)
	case k.Endpoint != "" && endpoint == "":
		return k, usageErrorf("--provider %s needs --endpoint: %s", k.Name, k.Endpoint)
	}
	return k, nil
}

// validate checks the flags before anything is opened or sent.
func (o *providerOptions) validate() error {
	kind, err := checkKind(o.provider, o.endpoint, false)
	if err != nil {
		return err
	}
	if err := checkBillTo(o.billTo); err != nil {
		return err
	}
	if strings.TrimSpace(o.model) == "" {
		return usageErrorf("--model must not be empty")
	}
	if kind.Chat && !o.flags.Changed("model") {
		return usageErrorf("--provider chat needs --model: a chat model id, e.g. meta-llama/Llama-3.1-8B-Instruct (on the router, with an optional :provider suffix such as :cerebras)")
	}
	if kind.Remote {
		if err := o.lab.validate(kind, o.flags, strings.TrimSpace(o.fallbackModel)); err != nil {
			return err
		}
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
	if err := o.budget.validate(); err != nil {
		return err
	}
	fbKind, fbModel := fallbackKind(strings.TrimSpace(o.fallbackModel), kind)
	if o.fallbackModel != "" && (fbModel == "" || fbModel == o.model && fbKind.Name == kind.Name) {
		return usageErrorf("--fallback-model must name another model (or local, chat:MODEL, hf:MODEL), got %q", o.fallbackModel)
	}
	if kind.Remote {
		if err := checkEndpoint(o.endpoint, o.model); err != nil {
			return err
		}
		if fb := strings.TrimSpace(o.fallbackModel); o.fallbackEP != "" && (fb == "" || fb == "local") {
			return usageErrorf("--fallback-endpoint needs a --fallback-model to ask there (a model id, chat:MODEL or hf:MODEL)")
		}
		if o.fallbackEP != "" {
			if _, err := provider.EndpointURL(o.fallbackEP, "model"); err != nil {
				return usageError(fmt.Errorf("--fallback-endpoint %w", err))
			}
		}
		if fb := strings.TrimSpace(o.fallbackModel); fb != "" && fb != "local" {
			if _, err := provider.EndpointURL(o.fallbackEndpoint(fbKind), fbModel); err != nil {
				return usageError(fmt.Errorf("--fallback-model: %w", err))
			}
			if fbKind.Chat && len(o.fallbackLabels()) == 0 {
				return usageErrorf("--fallback-model %s needs the labels to answer with: give --labels (the primary's), or keep --model's default (%s)", o.fallbackModel, strings.Join(defaultModelLabels, ","))
			}
		}
	}
	return nil
}

// fallbackLabels are the labels a fallback model answers with: --labels,
// else those of the default model when it is the primary (nil otherwise).
func (o *providerOptions) fallbackLabels() []string {
	if len(o.lab.list) > 0 {
		return o.lab.list
	}
	if k, _ := provider.KindOf(o.provider); !k.Chat && o.model == provider.DefaultModel {
		return defaultModelLabels
	}
	return nil
}

// fallbackEndpoint is where a fallback of kind fb is asked: --endpoint
// when the primary is of that kind and the endpoint can name the model (a
// chat endpoint always can: the model is in the body), else the kind's
// default ("").
func (o *providerOptions) fallbackEndpoint(fb provider.Kind) string {
	if o.fallbackEP != "" {
		return o.fallbackEP
	}
	if fb.Name != o.provider {
		return ""
	}
	if fb.Chat {
		return o.endpoint
	}
	return fallbackEndpoint(o.endpoint)
}

// open builds the guarded provider the flags ask for (build), and, for a
// member of a fleet budget (--budget, joinBudget), makes the guard's
// bounds the member's share and starts its renewals: classify, serve and
// the worker all join a budget here, the same way.
func (o *providerOptions) open(ios *IOStreams, log *slog.Logger, counters *resilience.Counters, tune ...func(*resilience.Config)) (*resilience.Guard, error) {
	if o.member != nil {
		tune = append(tune, o.member.Tune)
	}
	if o.ledger != nil {
		tune = append(tune, tuneLedger(o.ledger))
	}
	g, err := o.build(ios, log, counters, tune...)
	if err != nil || o.member == nil {
		return g, err
	}
	if err := o.member.Start(context.Background(), g); err != nil {
		// Before any call: a set-up error, as a database that cannot be
		// reached is for the queue.
		return nil, usageErrorf("joining --budget %s: %s", queue.Printable(o.budget.name), queue.Summarise(err))
	}
	log.Info("joined the budget", "budget", o.budget.name, "member", o.member.ID(), "share", o.member.Snapshot().Share)
	return g, nil
}

// build builds the guarded provider the flags ask for (openGuard), its
// policies reporting into counters (nil: not reported). tune, if any,
// adjust the policies' configuration before they are built (hooks, a
// command's own defaults). The token is looked for only for a remote
// provider; the embedded model is guarded Plain, and told which of the
// flags given it ignores.
func (o *providerOptions) build(ios *IOStreams, log *slog.Logger, counters *resilience.Counters, tune ...func(*resilience.Config)) (*resilience.Guard, error) {
	kind, _ := provider.KindOf(o.provider)
	spec := guardSpec{kind: kind, fallback: strings.TrimSpace(o.fallbackModel)}
	if !kind.Remote {
		if ignored := o.ignoredFlags(); len(ignored) > 0 {
			log.Warn("--provider " + kind.Name + " ignores " + strings.Join(ignored, ", ") + ": they apply to the Hugging Face API only")
		}
		spec.fallback = ""
		spec.policies = resilience.Config{Plain: true, Concurrency: o.concurrency, Logger: log, Counters: counters}
		for _, t := range tune {
			t(&spec.policies)
		}
		g, _, err := openGuard(spec)
		return g, err
	}
	tok, err := resolveToken(ios.getenv, o.lab.tokenEnv)
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
	spec.client = provider.Spec{
		Model:          o.model,
		Endpoint:       o.endpoint,
		Token:          tok.Value,
		Concurrency:    o.concurrency,
		Timeout:        o.timeout,
		ConnectTimeout: o.connectTimeout,
		UserAgent:      "hfsent/" + version,
		BillTo:         o.billTo,
		Labels:         o.lab.list,
		Prompt:         o.lab.prompt,
		Constrain:      o.lab.constrain,
		Logger:         log,
	}
	spec.fallbackLabels = o.fallbackLabels()
	fbKind, _ := fallbackKind(spec.fallback, kind)
	spec.fallbackEndpoint = o.fallbackEndpoint(fbKind)
	spec.policies = resilience.Config{
		Retries:       o.retries,
		RateLimitWait: min(o.rateLimitWait, o.rowDeadline),
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
		Logger:           log,
		Counters:         counters,
		TPM:              float64(o.lab.tpm),
		PaceByHeaders:    kind.Chat && o.lab.tpm == 0,
	}
	for _, t := range tune {
		t(&spec.policies)
	}
	g, info, err := openGuard(spec)
	if err != nil {
		return nil, err
	}
	if kind.Name == "hf" && info.API == provider.APITEI {
		log.Info("--endpoint ends in /predict: sending text-embeddings-inference's requests (as --provider tei)")
	}
	log.Debug("provider", "url", info.URL, "api", info.API, "token", tok.String())
	return g, nil
}

// guardSpec is what a guarded provider is made of: the kind of provider
// and its client's settings, the policies around it, and the fallback
// model ("", "local", or a model id asked at fallbackEndpoint).
type guardSpec struct {
	kind     provider.Kind
	client   provider.Spec
	policies resilience.Config
	fallback string
	// fallbackLabels are the labels a chat (or zero-shot) fallback answers
	// with; fallbackEndpoint is where it is asked, as
	// providerOptions.fallbackEndpoint says ("": the kind's default).
	fallbackLabels   []string
	fallbackEndpoint string
}

// openGuard is the one place a provider is built, whatever its kind, with
// its fallback and the guard around both: classify, serve, the worker and
// check all come here.
func openGuard(s guardSpec) (*resilience.Guard, provider.Info, error) {
	client, info, err := s.kind.New(s.client)
	if err != nil {
		return nil, info, usageError(fmt.Errorf("--endpoint %w", err))
	}
	fb, err := s.fallbackClient()
	if err != nil {
		return nil, info, err
	}
	s.policies.Fallback = fb
	return resilience.Build(client, s.policies), info, nil
}

// fallbackClient makes the --fallback-model client: the embedded model, or
// another model of the same kind (a fixed --endpoint without {model}
// cannot name another model, so the default router is asked then, in its
// own request format). It logs nothing of its own.
func (s guardSpec) fallbackClient() (provider.Classifier, error) {
	switch s.fallback {
	case "":
		return nil, nil
	case "local":
		k, _ := provider.KindOf("local")
		fb, _, err := k.New(provider.Spec{})
		return fb, err
	}
	kind, model := fallbackKind(s.fallback, s.kind)
	ep := s.fallbackEndpoint
	if ep == "" && s.client.Token == "" {
		return nil, usageErrorf("--fallback-model %s is asked on the Hugging Face API, which needs a token; set HF_TOKEN, use --fallback-model local, or an --endpoint with {model}", s.fallback)
	}
	if ep == "" && !kind.Chat {
		kind, _ = provider.KindOf("hf")
	}
	spec := s.client
	spec.Model, spec.Endpoint, spec.Client, spec.Logger = model, ep, nil, nil
	spec.Labels = s.fallbackLabels
	if !kind.Chat {
		// An hf fallback is zero-shot only when the primary's labels were
		// given (--labels), not for the default model's own.
		spec.Labels, spec.Prompt = s.client.Labels, ""
	}
	fb, _, err := kind.New(spec)
	if err != nil {
		return nil, usageError(fmt.Errorf("--fallback-model: %w", err))
	}
	return fb, nil
}

// fallbackEndpoint is where --fallback-model is asked: --endpoint when it
// has {model}, else the default router ("").
func fallbackEndpoint(endpoint string) string {
	if strings.Contains(endpoint, "{model}") {
		return endpoint
	}
	return ""
}
