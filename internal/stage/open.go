package stage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/budget"
	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/quality"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/spend"
)

// Deps is what opening a stage takes from the command around it.
type Deps struct {
	// Getenv reads the environment (the token).
	Getenv func(string) string
	Logger *slog.Logger
	// UserAgent is sent with every call.
	UserAgent string
	// Counters, when set, is where the guard's policies report (serve's
	// metrics); nil: its own.
	Counters *resilience.Counters
	// Ledger is the run's: every stage's calls are charged to it (nil:
	// none). Only a chat provider reports usage, so only its guard gets it.
	Ledger *spend.Ledger
	// Tune adjusts the policies' configuration before they are built (a
	// command's own hooks and defaults).
	Tune []func(*resilience.Config)
	// Escalates: a later stage answers the rows this one fails
	// (resilience.Config.Escalates).
	Escalates bool
	// Join makes the process a member of the stage's fleet budget
	// (Config.Budget, when named); the member bounds the guard and is
	// started with it. leave, called when the run ends, stops it (and,
	// with true, hands its share back at once).
	Join func(ctx context.Context, b Budget, max int, timeout time.Duration) (m *budget.Member, leave func(bool), err error)
}

// Stage is an opened Config: its guarded provider, and its budget's
// member, if any.
type Stage struct {
	Config *Config
	Guard  *resilience.Guard
	Member *budget.Member
	leave  func(bool)
}

// Close stops the stage's budget member, if any; with leave (no call in
// flight any more), it hands its share back at once.
func (s *Stage) Close(leave bool) {
	if s != nil && s.leave != nil {
		s.leave(leave)
		s.leave = nil
	}
}

// Open builds the guarded provider a validated Config asks for, and, for
// a member of a fleet budget (Config.Budget), joins it (Deps.Join) and
// makes the guard's bounds the member's share: the caller starts the
// member's renewals (budget.Member.Start) with the guard. The token is
// looked for only for a remote provider; the embedded model is guarded
// Plain, and told which of the settings given it ignores.
func Open(ctx context.Context, c *Config, d Deps) (*Stage, error) {
	log := d.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Stage{Config: c}
	tune := d.Tune
	if c.Budget.Name != "" && d.Join != nil {
		m, leave, err := d.Join(ctx, c.Budget, c.Concurrency, c.Timeout)
		if err != nil {
			return nil, err
		}
		s.Member, s.leave = m, leave
		tune = append(append(make([]func(*resilience.Config), 0, len(tune)+1), tune...), m.Tune)
	}
	g, err := c.guard(d, log, tune)
	if err != nil {
		s.Close(false)
		return nil, err
	}
	s.Guard = g
	return s, nil
}

// guard builds the stage's client and the policies around it.
func (c *Config) guard(d Deps, log *slog.Logger, tune []func(*resilience.Config)) (*resilience.Guard, error) {
	kind, _ := c.Kind()
	if !kind.Remote {
		if ignored := c.Ignored(); len(ignored) > 0 {
			log.Warn("--provider " + kind.Name + " ignores " + strings.Join(ignored, ", ") + ": they apply to the Hugging Face API only")
		}
		policies := resilience.Config{Plain: true, Concurrency: c.Concurrency, Logger: log, Counters: d.Counters}
		for _, t := range tune {
			t(&policies)
		}
		g, _, err := Build(kind, provider.Spec{}, policies)
		return g, err
	}
	if w := c.zeroShotUnsent(kind); w != "" {
		log.Warn(w)
	}
	tok, err := c.token(d.Getenv)
	if err != nil {
		return nil, err
	}
	policies := c.policies(kind, log, d.Counters)
	policies.Escalates = d.Escalates
	if kind.Chat {
		policies.Ledger = d.Ledger
	}
	for _, t := range tune {
		t(&policies)
	}
	g, info, err := Build(kind, c.spec(tok.Value, d.UserAgent, log), policies)
	if err != nil {
		if c.fallbackOf != "" {
			return nil, fmt.Errorf("--fallback-model: %w", errors.Unwrap(err))
		}
		return nil, err
	}
	if kind.Name == "hf" && info.API == provider.APITEI && c.fallbackOf == "" {
		log.Info("--endpoint ends in /predict: sending text-embeddings-inference's requests (as --provider tei)")
	}
	log.Debug("provider", "url", info.URL, "api", info.API, "token", tok.String())
	return g, nil
}

// Build makes kind's client from spec and wraps it in policies: the one
// place a guarded provider is made (Open, and check's preflight, which
// sends through a transport and policies of its own).
func Build(kind provider.Kind, spec provider.Spec, policies resilience.Config) (*resilience.Guard, provider.Info, error) {
	client, info, err := kind.New(spec)
	if err != nil {
		return nil, info, fmt.Errorf("--endpoint %w", err)
	}
	return resilience.Build(client, policies), info, nil
}

// token is the stage's token: from --token-env's variable (which must
// hold one), else as huggingface_hub finds it. A provider asked at the
// default endpoint (the Hugging Face API) needs one.
func (c *Config) token(getenv func(string) string) (provider.Token, error) {
	tok, err := ResolveToken(getenv, c.TokenEnv)
	if err != nil {
		return tok, err
	}
	if tok.Value != "" || c.Endpoint != "" {
		return tok, nil
	}
	if c.fallbackOf != "" {
		return tok, fmt.Errorf("--fallback-model %s is asked on the Hugging Face API, which needs a token; set HF_TOKEN, use --fallback-model local, or an --endpoint with {model}", c.fallbackOf)
	}
	login := "run `hf auth login`, which writes " + provider.TokenPath(getenv)
	if provider.TokenPath(getenv) == "" {
		login = "run `hf auth login` and set HF_TOKEN_PATH to the file it writes: with HOME unset there is no token file to look for"
	}
	return tok, fmt.Errorf("no Hugging Face token: set HF_TOKEN=hf_... (or %s), or use --provider local to run offline", login)
}

// ResolveToken is the token the settings say: from --token-env's variable
// tokenEnv (which must hold one), else as huggingface_hub finds it.
func ResolveToken(getenv func(string) string, tokenEnv string) (provider.Token, error) {
	if tokenEnv == "" {
		return provider.ResolveToken(getenv)
	}
	return provider.TokenFromEnv(getenv, tokenEnv)
}

// spec is the client's settings.
func (c *Config) spec(token, userAgent string, log *slog.Logger) provider.Spec {
	return provider.Spec{
		Model:          c.Model,
		Endpoint:       c.Endpoint,
		Token:          token,
		Concurrency:    c.Concurrency,
		Timeout:        c.Timeout,
		ConnectTimeout: c.ConnectTimeout,
		UserAgent:      userAgent,
		BillTo:         c.BillTo,
		Labels:         c.labels,
		Prompt:         c.prompt,
		Constrain:      c.Constrain,
		Logger:         log,
		// OpenAI's parameters (provider/reasoning.go).
		ReasoningEffort:     c.ReasoningEffort,
		MaxCompletionTokens: c.MaxCompletionTokens,
		ServiceTier:         c.ServiceTier,
		System:              c.system,
		Hypotheses:          c.hypotheses,
		HypothesisTemplate:  c.template,
		TopK:                c.TopK,
		MultiLabel:          c.MultiLabel,
		Threshold:           c.LabelThreshold,
		AllowNone:           c.set != nil && len(c.set.None) > 0,
	}
}

// policies is the guard's configuration the settings make.
func (c *Config) policies(kind provider.Kind, log *slog.Logger, counters *resilience.Counters) resilience.Config {
	return resilience.Config{
		Retries:       c.Retries,
		RateLimitWait: min(c.RateLimitWait, c.RowDeadline),
		// A Retry-After or a RateLimit reset is honoured up to the row's
		// deadline (and a shared pause lasts that long at most).
		MaxRetryAfter:    max(c.RowDeadline, time.Minute),
		RPS:              c.RPS,
		Burst:            c.Burst,
		Adaptive:         c.Adaptive,
		Concurrency:      c.Concurrency,
		Timeout:          c.Timeout,
		BreakerThreshold: c.BreakerThreshold,
		BreakerWindow:    c.BreakerWindow,
		BreakerMinCalls:  c.BreakerMinCalls,
		BreakerCooldown:  c.BreakerCooldown,
		Logger:           log,
		Counters:         counters,
		TPM:              float64(c.TPM),
		PaceByHeaders:    kind.Chat && c.TPM == 0,
	}
}

// For is what a calibration fitted on this stage's answers is for: the
// provider, the model, the labels, the label map and the hash of the
// request (calibration.RequestHash), built from the settings without a
// token or a call.
func (c *Config) For() (calibration.For, error) {
	kind, _ := c.Kind()
	f := calibration.For{Provider: kind.Name, Model: c.ModelName(), Labels: []string{}, LabelMap: c.labelMap.String()}
	if kind.Remote && len(c.labels) > 0 {
		f.Labels = c.labels
	}
	// The request's hash covers the label set: its rendered prompt (chat)
	// or hypotheses (zero-shot) are in the body.
	client, _, err := kind.New(provider.Spec{Model: c.Model, Endpoint: c.Endpoint, Labels: c.labels, Prompt: c.prompt,
		System: c.system, Hypotheses: c.hypotheses, HypothesisTemplate: c.template, Constrain: c.Constrain,
		TopK: c.TopK, MultiLabel: c.MultiLabel, Threshold: c.LabelThreshold, AllowNone: c.set != nil && len(c.set.None) > 0})
	if err != nil {
		return f, fmt.Errorf("--endpoint %w", err)
	}
	f.Request = calibration.RequestHash(kind.Name, client)
	return f, nil
}

// Answers is what a run does to a stage's answers: its label map and its
// calibration, read and checked before any call (ReadAnswers).
type Answers struct {
	Map quality.LabelMap
	// Calibration is --calibration read (nil without one); SHA its
	// file's SHA-256, hex, for --resume's sidecar.
	Calibration *calibration.File
	SHA         string
	// For is what a calibration fitted on this stage's answers is for.
	For calibration.For
}

// ReadAnswers reads --calibration and checks it was fitted for this
// stage, refusing one fitted for another unless --calibration-force.
func (c *Config) ReadAnswers(log *slog.Logger) (Answers, error) {
	a := Answers{Map: c.labelMap}
	var err error
	if a.For, err = c.For(); err != nil || c.Calibration == "" {
		return a, err
	}
	b, err := os.ReadFile(c.Calibration)
	if err != nil {
		return a, fmt.Errorf("--calibration %s: %v", c.Calibration, unwrapPathError(err))
	}
	f, err := calibration.Read(strings.NewReader(string(b)))
	if err != nil {
		return a, fmt.Errorf("--calibration %s: %v", c.Calibration, err)
	}
	sum := sha256.Sum256(b)
	a.Calibration, a.SHA = f, hex.EncodeToString(sum[:])
	if why := f.For.Diff(a.For); why != "" {
		if !c.CalibrationForce {
			return a, fmt.Errorf("--calibration %s was fitted for another run: %s; fit one on this run's results (hfsent calibrate), or give --calibration-force", c.Calibration, why)
		}
		log.Warn("--calibration-force: using a calibration fitted for another run; its scores may not mean what they say", "file", c.Calibration, "differs", why)
	}
	return a, nil
}

// PriceList is what the stage's calls are priced at (--price-in and
// --price-out, or --prices); the zero Prices for a provider that reports
// no usage, or without prices.
func (c *Config) PriceList() (spend.Prices, error) {
	if k, _ := c.Kind(); !k.Chat {
		return spend.Prices{}, nil
	}
	switch {
	case c.Prices != "":
		ps, err := spend.LoadFile(c.Prices)
		if err != nil {
			return ps, fmt.Errorf("--prices: %v", unwrapPathError(err))
		}
		if _, ok := ps.For(c.Model); !ok {
			return ps, fmt.Errorf("--prices %s has no price for --model %s (looked up as given, and without a :provider suffix): add its entry, or give --price-in and --price-out", c.Prices, c.Model)
		}
		return ps, nil
	case c.given("price-in") && c.given("price-cached-in"):
		return spend.Flat(c.PriceIn, c.PriceOut).WithCachedIn(c.PriceCachedIn), nil
	case c.given("price-in"):
		return spend.Flat(c.PriceIn, c.PriceOut), nil
	}
	return spend.Prices{}, nil
}
