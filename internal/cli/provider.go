package cli

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/budget"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/spend"
	"github.com/hfsent/hfsent/internal/stage"
)

// providerOptions are the provider and limit flags that classify, serve
// and worker share: the settings of one provider (stage.Config, which
// internal/stage validates and opens), and --cascade, a file of such
// settings, one a stage. Every command builds its providers through
// internal/stage, the same way for the flags, a --config file and each
// stage.
type providerOptions struct {
	stage.Config
	cascadeFile string

	flags *pflag.FlagSet // which flags were given
	use   providerUse

	// Set by setup: the --cascade file read, and the run's stages (the
	// cascade's, or the flags' provider and its --fallback-model).
	file   *stage.File
	stages []*stage.Config
	// Set by prepare: each stage's label map and calibration.
	answers []stage.Answers
	// ledger is what every stage's calls are charged to (nil: none);
	// opened, the stages once opened.
	ledger *spend.Ledger
	opened stage.Cascade
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
	fallbackHelp:      "model id, or local, that answers rows while the breaker is open, and rows whose calls failed after their retries (default: none, rows wait for recovery)",
}

// RateLimitWait is how long a batch's row refused for rate limits is asked
// again, from its first refusal (within --row-deadline).
const RateLimitWait = 2 * time.Minute

// providerHelp is --provider's help: the kinds (provider.Kinds) and what
// each needs.
const providerHelp = "hf: the Hugging Face API and servers that read its requests (needs a token unless --endpoint is set); chat: an OpenAI-compatible Chat Completions endpoint (default " + provider.DefaultChatEndpoint + ") asked to answer with one of --labels; tei: a text-embeddings-inference server's /predict (needs --endpoint; an --endpoint ending in /predict is read as tei); local: the embedded offline model, no network, no token"

func addProviderFlags(fs *pflag.FlagSet, o *providerOptions, use providerUse) {
	o.flags, o.use = fs, use
	o.Given = fs.Changed
	addStageFlags(fs, &o.Config, use)
	fs.StringVar(&o.FallbackModel, "fallback-model", "", use.fallbackHelp+"; chat:MODEL asks a chat model (at "+provider.DefaultChatEndpoint+", or --endpoint when the primary is chat) with the primary's labels, hf:MODEL a model of the Hugging Face API (the same as a two-stage --cascade)")
	fs.StringVar(&o.FallbackEndpoint, "fallback-endpoint", "", "where --fallback-model is asked, e.g. a local vLLM's http://127.0.0.1:8000/v1/chat/completions for chat:MODEL (default: --endpoint when the fallback is of the primary's kind and the endpoint can name it, else the kind's default endpoint)")
	fs.StringVar(&o.cascadeFile, "cascade", "", "a YAML file of stages, cheap to strong: a row goes to the first, and on to the next when its calibrated score is under the stage's escalate-below or its call failed; each stage's keys are the provider flags' long names (docs/guides/cascade.md)")
}

// addStageFlags registers the settings of one provider into c: the flags
// of a command, or the keys of a --cascade file's stage (stageFlags).
func addStageFlags(fs *pflag.FlagSet, c *stage.Config, use providerUse) {
	c.RateLimitWait = use.rateLimitWait
	fs.StringVar(&c.Provider, "provider", "hf", providerHelp)
	fs.StringVar(&c.Model, "model", provider.DefaultModel, "model id")
	fs.StringVar(&c.Endpoint, "endpoint", "", "full http(s) URL to POST to, e.g. a dedicated Inference Endpoint or a local server; {model} is replaced\n(default "+provider.DefaultEndpoint+")")
	fs.IntVarP(&c.Concurrency, "concurrency", "c", 8, "calls in flight at most; a row waiting for a retry holds no slot ("+rangeHelp(1, maxConcurrency)+"; with --batch-size, at most "+show(maxTextsInFlight)+" texts in flight)")
	fs.BoolVar(&c.Adaptive, "adaptive", false, "find the provider's real capacity below --concurrency (lowers on 429s, and on timeouts when they are widespread; raises on success)")
	fs.DurationVar(&c.AdmissionWait, "admission-wait", use.admissionWait, use.admissionWaitHelp)
	fs.Float64Var(&c.RPS, "rps", 0, "provider calls per second, retries included (0: no limit, else "+rangeHelp(minRPS, maxRPS)+")")
	fs.IntVar(&c.Burst, "burst", 1, "calls allowed at once above --rps ("+rangeHelp(1, maxBurst)+")")
	fs.DurationVar(&c.Timeout, "timeout", 12*time.Second, "one attempt, end to end ("+rangeHelp(minTimeout, maxTimeout)+")")
	fs.DurationVar(&c.ConnectTimeout, "connect-timeout", 3*time.Second, "connection set-up ("+rangeHelp(minTimeout, maxConnectTimeout)+")")
	fs.DurationVar(&c.RowDeadline, "row-deadline", 10*time.Minute, "all attempts and waits of one row (a call to an endpoint scaled to zero may wait for its replica that long); past it the row ends with its last outcome, or circuit_open ("+rangeHelp(minTimeout, maxRowDeadline)+")")
	if use.noRowDeadline {
		_ = fs.MarkHidden("row-deadline")
	}
	fs.IntVar(&c.Retries, "retries", use.retries, use.retriesHelp)
	fs.Float64Var(&c.BreakerThreshold, "breaker-threshold", 0.3, "failure rate that opens the circuit breaker (5xx, timeouts, connection errors count, a row's repeated failures once; 429 and 4xx do not) ("+rangeHelp(minThreshold, 1.0)+")")
	fs.DurationVar(&c.BreakerWindow, "breaker-window", 60*time.Second, "window over which the failure rate is measured ("+rangeHelp(minBreakerWindow, maxBreakerWindow)+")")
	fs.IntVar(&c.BreakerMinCalls, "breaker-min-calls", 20, "calls in the window before the rate counts ("+rangeHelp(1, maxMinCalls)+")")
	fs.DurationVar(&c.BreakerCooldown, "breaker-cooldown", 60*time.Second, "time the breaker stays open before a probe ("+rangeHelp(minTimeout, maxCooldown)+")")
	addBillToFlag(fs, &c.BillTo)
	addLabelFlags(fs, c)
	addBudgetFlags(fs, &c.Budget)
}

// stageFlags makes the FlagSet of one --cascade stage's keys, bound to c:
// the provider flags, the prices, the label map and calibration, and
// escalate-below, with the command's defaults.
func stageFlags(use providerUse) func(c *stage.Config) *pflag.FlagSet {
	return func(c *stage.Config) *pflag.FlagSet {
		fs := pflag.NewFlagSet("stage", pflag.ContinueOnError)
		addStageFlags(fs, c, use)
		addPriceFlags(fs, c)
		addAnswerFlags(fs, c)
		fs.Float64Var(&c.EscalateBelow, "escalate-below", 0, "a row this stage answers with a calibrated score under it, or with none, goes on to the next stage (0: only a failure does)")
		return fs
	}
}

// addBillToFlag adds --bill-to, which classify, serve, worker and check take.
func addBillToFlag(fs *pflag.FlagSet, v *string) {
	fs.StringVar(v, "bill-to", "", "bill the calls to this organisation (sent as X-HF-Bill-To) instead of the token's owner; it must be one you belong to, with billing set up")
}

// setup reads --cascade, or takes the flags' provider (and
// --fallback-model's, a second stage), and validates every stage, before
// anything is opened or sent: the run's stages.
func (o *providerOptions) setup() error {
	if o.cascadeFile == "" {
		if err := o.Config.Validate(); err != nil {
			return usageError(err)
		}
		o.stages = []*stage.Config{&o.Config}
		if fb := o.Config.Fallback(); fb != nil {
			o.stages = append(o.stages, fb)
		}
		return nil
	}
	probe := stageFlags(o.use)(&stage.Config{})
	var clash error
	probe.VisitAll(func(f *pflag.Flag) {
		if clash == nil && o.flags.Lookup(f.Name) != nil && o.flags.Changed(f.Name) {
			clash = usageErrorf("--%s and --cascade: the cascade's stages set the provider; set %s in the stages of %s", f.Name, f.Name, o.cascadeFile)
		}
	})
	for _, name := range []string{"fallback-model", "fallback-endpoint"} {
		if clash == nil && o.flags.Changed(name) {
			clash = usageErrorf("--%s and --cascade: a cascade's next stage is its fallback; add the model as a stage of %s", name, o.cascadeFile)
		}
	}
	if clash != nil {
		return clash
	}
	data, err := stage.ReadFile("--cascade", o.cascadeFile)
	if err != nil {
		return usageError(err)
	}
	if o.file, err = stage.LoadCascade(o.cascadeFile, data, stageFlags(o.use)); err != nil {
		return usageError(err)
	}
	o.stages = o.file.Configs()
	for i, c := range o.stages {
		if err := c.Validate(); err != nil {
			return usageError(o.file.Wrap(i, err))
		}
	}
	return nil
}

// first is the run's first stage: the one that admits rows (its -c, its
// --admission-wait), and the provider a queue batch is for.
func (o *providerOptions) first() *stage.Config { return o.stages[0] }

// place puts an error about stage i in the --cascade file (its line),
// when there is one.
func (o *providerOptions) place(i int, err error) error {
	if o.file == nil || err == nil {
		return err
	}
	return o.file.Wrap(i, err)
}

// eachStage runs check on every stage, placing its error.
func (o *providerOptions) eachStage(check func(*stage.Config) error) error {
	for i, c := range o.stages {
		if err := check(c); err != nil {
			var ee *exitError
			if errors.As(err, &ee) {
				return &exitError{code: ee.code, err: o.place(i, ee.err)}
			}
			return usageError(o.place(i, err))
		}
	}
	return nil
}

// writesScores: the stage's answers fill the scores column (--top-k,
// --multi-label).
func writesScores(c *stage.Config) bool { return c.MultiLabel || c.TopK > 0 }

// anyStage reports whether some stage satisfies is.
func (o *providerOptions) anyStage(is func(*stage.Config) bool) bool {
	for _, c := range o.stages {
		if is(c) {
			return true
		}
	}
	return false
}

// prepare reads each stage's --calibration and label map, checked
// against the stage, before any call.
func (o *providerOptions) prepare(log *slog.Logger) error {
	o.answers = make([]stage.Answers, len(o.stages))
	for i, c := range o.stages {
		a, err := c.ReadAnswers(log)
		if err != nil {
			return usageError(o.place(i, err))
		}
		o.answers[i] = a
	}
	return nil
}

// calibrated reports whether some stage has a calibration: scores are
// then calibrated, and raw_score keeps the model's.
func (o *providerOptions) calibrated() bool {
	for _, a := range o.answers {
		if a.Calibration != nil {
			return true
		}
	}
	return false
}

// cascadeSHA is the hash of the cascade's settings, for --resume's
// sidecar ("" without --cascade).
func (o *providerOptions) cascadeSHA() string {
	if o.file == nil {
		return ""
	}
	return stage.Hash(o.stages, o.answers)
}

// openStages opens the run's stages (stage.OpenCascade): each stage's
// guard, the first's reporting into counters (nil: its own) and tuned by
// tune, and, for a stage with a fleet budget, its member on the budget's
// database (budgets), started (startMembers). The returned close ends
// them; with leave (no call in flight any more), the members hand their
// shares back at once.
func (o *providerOptions) openStages(ctx context.Context, ios *IOStreams, log *slog.Logger, b *budgets, counters *resilience.Counters, tune ...func(*resilience.Config)) (func(leave bool), error) {
	d := stage.Deps{Getenv: ios.getenv, Logger: log, UserAgent: "hfsent/" + version, Counters: counters,
		Ledger: o.ledger, Tune: tune, Join: b.join(ctx, ios, log, o.ledger)}
	opened, err := stage.OpenCascade(ctx, o.stages, d)
	if err != nil {
		b.close()
		var ee *exitError
		if errors.As(err, &ee) {
			return nil, err
		}
		return nil, usageError(err)
	}
	o.opened = opened
	closeFn := func(leave bool) {
		opened.Close(leave)
		b.close()
	}
	if err := o.startMembers(ctx, log); err != nil {
		closeFn(false)
		return nil, err
	}
	return closeFn, nil
}

// guard is the first stage's guarded provider: the one rows are admitted
// by.
func (o *providerOptions) guard() *resilience.Guard { return o.opened[0].Guard }

// member is the first stage's budget member (nil: none).
func (o *providerOptions) member() *budget.Member { return o.opened[0].Member }

// cascading reports whether the run's rows may go through more than one
// stage (--cascade, or --fallback-model).
func (o *providerOptions) cascading() bool { return len(o.stages) > 1 }

// stageCount is the number of a --cascade's stages, whose figures the
// summary reports one by one (0 without --cascade).
func (o *providerOptions) stageCount() int {
	if o.file == nil {
		return 0
	}
	return len(o.stages)
}
