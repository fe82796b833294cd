// Package stage is the one way hfsent builds a provider: a Config (the
// provider flags' values, which the flags, a --config file and each stage
// of a --cascade file all fill, the same way), checked by Validate, then
// opened (Open) into a Stage: the guarded provider, with its token, its
// limits, its budget, its calibration and its answers' label map. A
// cascade (Cascade) is stages opened one after the other, sharing one
// spend ledger; a run of one provider is a cascade of one, and
// --fallback-model a cascade of two.
//
// The files (file.go) are read with go.yaml.in/yaml/v3's Node API, which
// keeps each key's line (every error names FILE:LINE and the key) and the
// file's comments and order (for a tool that writes it back). Each key is
// set through the flag of the same long name, so a file's value is parsed
// and bounded as the flag's is.
package stage

import (
	"strings"
	"time"

	"github.com/hfsent/hfsent/internal/labelset"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/quality"
)

// Config is one provider's settings: the provider flags' values (their
// long names in the comments), and the keys a cascade's stage adds.
// Fields a command does not take stay at their zero value.
type Config struct {
	Provider string // provider
	Model    string // model
	Endpoint string // endpoint

	Concurrency    int           // concurrency (-c)
	Adaptive       bool          // adaptive
	AdmissionWait  time.Duration // admission-wait
	RPS            float64       // rps
	Burst          int           // burst
	Timeout        time.Duration // timeout
	ConnectTimeout time.Duration // connect-timeout
	RowDeadline    time.Duration // row-deadline
	Retries        int           // retries
	// RateLimitWait bounds a row's retries after rate limits by time (not
	// a flag: the command's choice, resilience.Config.RateLimitWait).
	RateLimitWait time.Duration

	BreakerThreshold float64       // breaker-threshold
	BreakerWindow    time.Duration // breaker-window
	BreakerMinCalls  int           // breaker-min-calls
	BreakerCooldown  time.Duration // breaker-cooldown

	FallbackModel    string // fallback-model
	FallbackEndpoint string // fallback-endpoint
	BillTo           string // bill-to

	Labels     string // labels
	PromptFile string // prompt-file
	TokenEnv   string // token-env
	TPM        int    // tpm
	Constrain  string // constrain

	ReasoningEffort     string  // reasoning-effort
	MaxCompletionTokens int     // max-completion-tokens
	ServiceTier         string  // service-tier
	LabelsFile          string  // labels-file
	Examples            string  // examples
	ExamplesPerLabel    int     // examples-per-label
	ExamplesTextColumn  string  // examples-text-column
	ExamplesLabelColumn string  // examples-label-column
	MultiLabel          bool    // multi-label
	LabelThreshold      float64 // label-threshold
	TopK                int     // top-k
	HypothesisTemplate  string  // hypothesis-template

	Budget Budget

	PriceIn  float64 // price-in
	PriceOut float64 // price-out
	// PriceCachedIn is price-cached-in: USD per million prompt tokens
	// read from the server's prompt cache.
	PriceCachedIn float64
	Prices        string // prices

	LabelMap         string // label-map
	Calibration      string // calibration
	CalibrationForce bool   // calibration-force

	// EscalateBelow is a cascade stage's escalate-below: a row it answers
	// with a calibrated score under it, or with none, goes on to the next
	// stage (0: only a failure sends a row on).
	EscalateBelow float64

	// Given reports whether a setting was given, by its flag's long name
	// (on the command line, in a --config file, or as a stage's key):
	// some checks and defaults depend on it. nil: nothing was.
	Given func(name string) bool

	// Read by Validate: the labels split, the template read, the map
	// parsed.
	labels   []string
	prompt   string
	labelMap quality.LabelMap
	// The label set read (readLabelSet), and what it renders: a chat
	// model's system message, a zero-shot model's hypotheses.
	set        *labelset.Set
	system     string
	hypotheses []string
	template   string
	// fallbackOf is the --fallback-model a stage was derived from
	// (Fallback), for its messages; "" for a stage of its own.
	fallbackOf string
}

// Budget is a member's fleet budget: --budget and its flags.
type Budget struct {
	Name      string        // budget
	Lease     time.Duration // budget-lease
	SafeFor   time.Duration // budget-safe-for
	SafeShare int           // budget-safe-share
}

// given reports whether name was given.
func (c *Config) given(name string) bool { return c.Given != nil && c.Given(name) }

// Kind is the provider's kind (provider.KindOf); ok is false for a
// --provider that is none.
func (c *Config) Kind() (provider.Kind, bool) { return provider.KindOf(c.Provider) }

// LabelList is --labels as Validate split it (nil when not given).
func (c *Config) LabelList() []string { return c.labels }

// Prompt is --prompt-file's template as Validate read it ("": the
// default instruction).
func (c *Config) Prompt() string { return c.prompt }

// ModelName is the model the provider answers as: --model, or the
// embedded model's name.
func (c *Config) ModelName() string {
	if k, _ := c.Kind(); k.Model != "" {
		return k.Model
	}
	return c.Model
}

// Prefixes of a --fallback-model of another kind: "chat:MODEL" asks a
// chat model, "hf:MODEL" a model of the Hugging Face API.
const (
	ChatPrefix = "chat:"
	HFPrefix   = "hf:"
)

// FallbackKind reads a --fallback-model: "local", "chat:MODEL",
// "hf:MODEL", or a model of the primary's kind.
func FallbackKind(fb string, primary provider.Kind) (provider.Kind, string) {
	switch {
	case strings.HasPrefix(fb, ChatPrefix):
		k, _ := provider.KindOf("chat")
		return k, strings.TrimSpace(fb[len(ChatPrefix):])
	case strings.HasPrefix(fb, HFPrefix):
		k, _ := provider.KindOf("hf")
		return k, strings.TrimSpace(fb[len(HFPrefix):])
	}
	return primary, fb
}

// DefaultModelLabels are the labels of provider.DefaultModel: a chat
// fallback behind it answers with them.
var DefaultModelLabels = []string{"NEGATIVE", "POSITIVE"}

// fallbackLabels are the labels a fallback model answers with: --labels,
// else those of the default model when it is the primary (nil
// otherwise).
func (c *Config) fallbackLabels() []string {
	if len(c.labels) > 0 {
		return c.labels
	}
	if k, _ := c.Kind(); !k.Chat && c.Model == provider.DefaultModel {
		return DefaultModelLabels
	}
	return nil
}

// fallbackEndpoint is where a fallback of kind fb is asked:
// --fallback-endpoint, else --endpoint when the primary is of that kind
// and the endpoint can name the model (a chat endpoint always can: the
// model is in the body; an HF one when it has {model}), else the kind's
// default ("").
func (c *Config) fallbackEndpoint(fb provider.Kind) string {
	if c.FallbackEndpoint != "" {
		return c.FallbackEndpoint
	}
	if fb.Name != c.Provider {
		return ""
	}
	if fb.Chat || strings.Contains(c.Endpoint, "{model}") {
		return c.Endpoint
	}
	return ""
}

// Fallback is the second stage --fallback-model makes of a (validated)
// Config: the fallback's kind, model and endpoint, asked with the
// primary's token, labels (the default model's, for a chat fallback
// behind it), prompt, label map and limits, and none of its budget or
// calibration; nil without --fallback-model, or for a primary that
// ignores it (the embedded model). Its failures are the row's: it is the
// last stage.
func (c *Config) Fallback() *Config {
	fb := strings.TrimSpace(c.FallbackModel)
	if k, _ := c.Kind(); fb == "" || !k.Remote {
		return nil
	}
	s := *c
	s.FallbackModel, s.FallbackEndpoint, s.fallbackOf = "", "", fb
	s.Budget, s.Calibration, s.CalibrationForce, s.EscalateBelow = Budget{}, "", false, 0
	s.Given = nil
	if fb == "local" {
		s.Provider, s.Model, s.Endpoint = "local", "", ""
		return &s
	}
	primary, _ := c.Kind()
	kind, model := FallbackKind(fb, primary)
	ep := c.fallbackEndpoint(kind)
	if ep == "" && !kind.Chat {
		kind, _ = provider.KindOf("hf")
	}
	s.Provider, s.Model, s.Endpoint = kind.Name, model, ep
	// A chat fallback paces itself by the server's headers: --tpm is the
	// primary's.
	s.TPM = 0
	if kind.Chat {
		s.labels = c.fallbackLabels()
		s.hypotheses, s.template = nil, ""
		if c.set != nil && c.system == "" {
			s.system = c.set.System(c.instruction())
		}
	} else {
		// An hf fallback is zero-shot only when the primary's labels were
		// given (--labels), not for the default model's own; it takes no
		// prompt (nor a label file's rendering; its hypotheses, when the
		// primary is a zero-shot model too).
		s.prompt, s.system = "", ""
	}
	return &s
}
