package stage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hfsent/hfsent/internal/budget"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/quality"
)

// Validate checks the settings before anything is opened or sent, with
// every message naming the flag (its long name with --) that fixes it;
// it reads --prompt-file and splits --labels and --label-map.
func (c *Config) Validate() error {
	kind, err := CheckKind(c.Provider, c.Endpoint, false)
	if err != nil {
		return err
	}
	if err := CheckBillTo(c.BillTo); err != nil {
		return err
	}
	if strings.TrimSpace(c.Model) == "" {
		return errors.New("--model must not be empty")
	}
	if kind.Chat && !c.given("model") {
		return errors.New("--provider chat needs --model: a chat model id, e.g. meta-llama/Llama-3.1-8B-Instruct (on the router, with an optional :provider suffix such as :cerebras)")
	}
	if kind.Remote {
		if err := c.validLabels(kind); err != nil {
			return err
		}
	}
	if err := c.validScores(kind); err != nil {
		return err
	}
	if err := c.validBounds(); err != nil {
		return err
	}
	if err := c.Budget.validate(); err != nil {
		return err
	}
	if err := c.validFallback(kind); err != nil {
		return err
	}
	if err := c.validPrices(kind); err != nil {
		return err
	}
	return c.validAnswers()
}

// ValidateRequest checks only what makes the request a run sends (the
// kind, the endpoint and model, the labels, the prompt, the constraint)
// and the label map: what a calibration is fitted for (For), for a
// command that describes a run by them (calibrate).
func (c *Config) ValidateRequest() error {
	kind, err := CheckKind(c.Provider, c.Endpoint, false)
	if err != nil {
		return err
	}
	if kind.Remote {
		if err := c.validLabels(kind); err != nil {
			return err
		}
		if err := CheckEndpoint(c.Endpoint, c.Model); err != nil {
			return err
		}
	}
	if c.labelMap, err = quality.ParseLabelMap(c.LabelMap); err != nil {
		return fmt.Errorf("--label-map: %v", err)
	}
	return nil
}

// validBounds checks the numeric settings against their ranges.
func (c *Config) validBounds() error {
	return first(
		InRange("--concurrency", c.Concurrency, 1, MaxConcurrency, ""),
		InRange("--admission-wait", c.AdmissionWait, 0, MaxAdmissionWait, ""),
		InRange("--timeout", c.Timeout, MinTimeout, MaxTimeout, ""),
		InRange("--connect-timeout", c.ConnectTimeout, MinTimeout, MaxConnectTimeout, ""),
		InRange("--row-deadline", c.RowDeadline, MinTimeout, MaxRowDeadline, ""),
		InRange("--rps", c.RPS, MinRPS, MaxRPS, "no limit"),
		InRange("--burst", c.Burst, 1, MaxBurst, ""),
		InRange("--retries", c.Retries, 0, MaxRetries, ""),
		InRange("--breaker-threshold", c.BreakerThreshold, MinThreshold, 1, ""),
		InRange("--breaker-window", c.BreakerWindow, MinBreakerWindow, MaxBreakerWindow, ""),
		InRange("--breaker-min-calls", c.BreakerMinCalls, 1, MaxMinCalls, ""),
		InRange("--breaker-cooldown", c.BreakerCooldown, MinTimeout, MaxCooldown, ""),
	)
}

// validFallback checks --fallback-model and --fallback-endpoint.
func (c *Config) validFallback(kind provider.Kind) error {
	fb := strings.TrimSpace(c.FallbackModel)
	fbKind, fbModel := FallbackKind(fb, kind)
	if c.FallbackModel != "" && (fbModel == "" || fbModel == c.Model && fbKind.Name == kind.Name) {
		return fmt.Errorf("--fallback-model must name another model (or local, chat:MODEL, hf:MODEL), got %q", c.FallbackModel)
	}
	if !kind.Remote {
		return nil
	}
	if err := CheckEndpoint(c.Endpoint, c.Model); err != nil {
		return err
	}
	if c.FallbackEndpoint != "" && (fb == "" || fb == "local") {
		return errors.New("--fallback-endpoint needs a --fallback-model to ask there (a model id, chat:MODEL or hf:MODEL)")
	}
	if c.FallbackEndpoint != "" {
		if _, err := provider.EndpointURL(c.FallbackEndpoint, "model"); err != nil {
			return fmt.Errorf("--fallback-endpoint %w", err)
		}
	}
	if fb != "" && fb != "local" {
		if _, err := provider.EndpointURL(c.fallbackEndpoint(fbKind), fbModel); err != nil {
			return fmt.Errorf("--fallback-model: %w", err)
		}
		if fbKind.Chat && len(c.fallbackLabels()) == 0 {
			return fmt.Errorf("--fallback-model %s needs the labels to answer with: give --labels (the primary's), or keep --model's default (%s)", c.FallbackModel, strings.Join(DefaultModelLabels, ","))
		}
	}
	return nil
}

// validPrices checks the price settings: both of --price-in and
// --price-out or neither, not with --prices, and only for a provider that
// reports usage.
func (c *Config) validPrices(kind provider.Kind) error {
	in, out := c.given("price-in"), c.given("price-out")
	return first(
		InRange("--price-in", c.PriceIn, 0, MaxPrice, ""),
		InRange("--price-out", c.PriceOut, 0, MaxPrice, ""),
		InRange("--price-cached-in", c.PriceCachedIn, 0, MaxPrice, ""),
		refuse(c.given("price-cached-in") && !in && c.Prices == "", "--price-cached-in goes with --price-in and --price-out: it prices the cached part of the prompt tokens they price"),
		refuse(c.given("price-cached-in") && c.Prices != "", "--price-cached-in and --prices: the price file gives each model's cached rate (cache_read_input_token_cost); give one"),
		refuse(in != out, "--price-in and --price-out go together: a price for one kind of token only would guess the other"),
		refuse((in || out) && c.Prices != "", "--prices and --price-in/--price-out contradict each other; give one"),
		refuse(c.PricesGiven() && !kind.Chat, "--price-in, --price-out and --prices price the usage a chat model reports (--provider chat); --provider %s reports none", c.Provider),
	)
}

// PricesGiven reports whether any price setting was given.
func (c *Config) PricesGiven() bool {
	return c.given("price-in") || c.given("price-out") || c.given("price-cached-in") || c.Prices != ""
}

// validAnswers checks what the run does to the answers: --label-map,
// --calibration-force, escalate-below.
func (c *Config) validAnswers() error {
	if c.CalibrationForce && c.Calibration == "" {
		return errors.New("--calibration-force needs --calibration FILE")
	}
	var err error
	if c.labelMap, err = quality.ParseLabelMap(c.LabelMap); err != nil {
		return fmt.Errorf("--label-map: %v", err)
	}
	if err := InRange("escalate-below", c.EscalateBelow, 0, 1, ""); err != nil {
		return err
	}
	if c.EscalateBelow > 0 && c.Calibration == "" {
		return errors.New("escalate-below needs a calibration (the stage's calibration: hfsent calibrate fits one): an uncalibrated score says nothing of how often the label is right")
	}
	return nil
}

// validate checks the budget's settings.
func (b Budget) validate() error {
	if b.Name == "" {
		return nil
	}
	if err := budget.CheckName(b.Name); err != nil {
		return fmt.Errorf("--budget: %w", err)
	}
	return first(
		InRange("--budget-lease", b.Lease, MinBudgetLease, MaxBudgetLease, ""),
		InRange("--budget-safe-for", b.SafeFor, MinBudgetSafeFor, MaxBudgetSafeFor, "no safe share"),
		InRange("--budget-safe-share", b.SafeShare, 0, MaxBudgetCap, ""),
		refuse(b.SafeShare > 0 && b.SafeFor == 0, "--budget-safe-share needs a --budget-safe-for: with --budget-safe-for 0 there is no safe share"),
	)
}

// validLabels checks the label settings for kind (and the fallback's),
// before anything is opened or sent; it reads --prompt-file.
func (c *Config) validLabels(kind provider.Kind) error {
	fallback := strings.TrimSpace(c.FallbackModel)
	given := c.given("labels")
	if given {
		var err error
		if c.labels, err = ParseLabels(c.Labels); err != nil {
			return err
		}
	}
	if err := c.readLabelSet(kind); err != nil {
		return err
	}

	if kind.Chat && !given && c.set == nil {
		return errors.New("--provider chat needs --labels a,b,... or --labels-file FILE: the labels the model must answer with")
	}
	if c.PromptFile != "" {
		if !kind.Chat && !strings.HasPrefix(fallback, ChatPrefix) {
			return errors.New("--prompt-file is for --provider chat (or a chat:MODEL --fallback-model)")
		}
		if err := c.readPrompt(); err != nil {
			return err
		}
	}
	if c.TokenEnv != "" && !EnvName(c.TokenEnv) {
		return fmt.Errorf("--token-env %q is not an environment variable name (letters, digits, _)", c.TokenEnv)
	}
	if err := CheckConstrain(c.Constrain, c.given("constrain"), kind.Chat || strings.HasPrefix(fallback, ChatPrefix)); err != nil {
		return err
	}
	if err := c.checkOpenAI(kind.Chat || strings.HasPrefix(fallback, ChatPrefix)); err != nil {
		return err
	}
	if err := InRange("--tpm", c.TPM, 1, MaxTPM, "paced by the server's headers"); err != nil {
		return err
	}
	if c.TPM > 0 && !kind.Chat {
		return errors.New("--tpm is for --provider chat: only a chat provider reports the tokens it counts (a chat --fallback-model is not paced by it)")
	}
	if given && kind.Endpoint != "" {
		return fmt.Errorf("--labels is not for --provider %s: its server takes no candidate labels", kind.Name)
	}
	return nil
}

// readPrompt reads --prompt-file: at most MaxPromptSize bytes of UTF-8
// holding {text}.
func (c *Config) readPrompt() error {
	b, err := ReadBounded(c.PromptFile, MaxPromptSize)
	switch {
	case err != nil:
		return fmt.Errorf("--prompt-file: cannot read %s: %s", c.PromptFile, unwrapPathError(err))
	case len(b) > MaxPromptSize:
		return fmt.Errorf("--prompt-file: %s is larger than %d KiB", c.PromptFile, MaxPromptSize>>10)
	case !utf8.Valid(b):
		return fmt.Errorf("--prompt-file: %s is not UTF-8", c.PromptFile)
	case !strings.Contains(string(b), "{text}"):
		return fmt.Errorf("--prompt-file: %s has no {text}: the row's text would not be sent", c.PromptFile)
	}
	c.prompt = string(b)
	return nil
}

// remoteFlags are the provider flags that only a remote provider (HTTP)
// and the policies around it read: --provider local ignores them.
var remoteFlags = []string{"model", "endpoint", "adaptive", "rps", "burst", "timeout", "connect-timeout", "retries",
	"breaker-threshold", "breaker-window", "breaker-min-calls", "breaker-cooldown", "fallback-model", "fallback-endpoint", "bill-to",
	"labels", "prompt-file", "token-env", "tpm", "constrain", "labels-file", "examples", "examples-per-label",
	"hypothesis-template", "examples-text-column", "examples-label-column"}

// Ignored lists the settings given that this provider ignores (the
// embedded model reads none of the remote ones), as --flags.
func (c *Config) Ignored() []string {
	if k, _ := c.Kind(); k.Remote || c.Given == nil {
		return nil
	}
	var out []string
	for _, name := range remoteFlags {
		if c.given(name) {
			out = append(out, "--"+name)
		}
	}
	return out
}

// CheckBillTo refuses a --bill-to that is no organisation name: it goes
// into a header as it is.
func CheckBillTo(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 96 {
		return fmt.Errorf("--bill-to must be an organisation name of at most 96 characters, got %d", len(v))
	}
	for _, c := range v {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("--bill-to %q: an organisation name has only letters, digits, '-', '_' and '.'", v)
		}
	}
	return nil
}

// CheckEndpoint refuses an --endpoint or a --model that make no URL (hf
// provider): the endpoint first, with a harmless model id, then the model
// put in it, so that the message blames the setting that is wrong.
func CheckEndpoint(endpoint, model string) error {
	if _, err := provider.EndpointURL(endpoint, "model"); err != nil {
		return fmt.Errorf("--endpoint %w", err)
	}
	if _, err := provider.EndpointURL(endpoint, model); err != nil {
		return fmt.Errorf("--model: %w", err)
	}
	return nil
}

// CheckKind refuses a --provider that is no kind (remote only: one that
// check can ask), or one that needs --endpoint without it.
func CheckKind(name, endpoint string, remoteOnly bool) (provider.Kind, error) {
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
		return k, fmt.Errorf("--provider %q: want %s", name, want)
	case k.Endpoint != "" && endpoint == "":
		return k, fmt.Errorf("--provider %s needs --endpoint: %s", k.Name, k.Endpoint)
	}
	return k, nil
}

// CheckConstrain refuses a --constrain that is no constraint, or one
// given for a provider that is not chat.
func CheckConstrain(v string, given, chat bool) error {
	if _, _, err := provider.ParseConstrain(v); err != nil || v == "" {
		if err == nil {
			err = fmt.Errorf("want one of %s, got %q", strings.Join(provider.ConstrainNames, ", "), v)
		}
		return fmt.Errorf("--constrain: %v", err)
	}
	if given && !chat {
		return errors.New("--constrain is for --provider chat (or a chat:MODEL --fallback-model)")
	}
	return nil
}

// ParseLabels reads --labels: comma-separated, spaces around each
// trimmed, checked as provider.CheckLabels checks them. Every comma
// separates, so a label holds none; a double quote is refused rather than
// read as CSV quoting: '"a,b",c' would otherwise be the three labels "a,
// b" and c, and "a be written as a label with success.
func ParseLabels(v string) ([]string, error) {
	if i := strings.IndexByte(v, '"'); i >= 0 {
		return nil, fmt.Errorf("--labels: a double quote at character %d: labels are split at every comma, so a label can hold neither a comma nor a quote (write --labels a,b,c)", utf8.RuneCountInString(v[:i])+1)
	}
	var out []string
	for _, l := range strings.Split(v, ",") {
		out = append(out, strings.TrimSpace(l))
	}
	if err := provider.CheckLabels(out); err != nil {
		return nil, fmt.Errorf("--labels: %v", err)
	}
	return out, nil
}

// ReadBounded reads at most limit+1 bytes of path: enough to tell a file
// over limit, never more, whatever it is (/dev/zero, a FIFO that never
// ends, a file of gigabytes).
func ReadBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit+1))
}

// EnvName reports whether s is an environment variable's name.
func EnvName(s string) bool {
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// unwrapPathError is the cause of a *os.PathError, without the path (the
// message names it).
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// checkOpenAI refuses an OpenAI parameter that is no value of its flag,
// or one given for a provider that is not chat.
func (c *Config) checkOpenAI(chat bool) error {
	if c.ReasoningEffort != "" && !slices.Contains(provider.ReasoningEfforts, c.ReasoningEffort) {
		return fmt.Errorf("--reasoning-effort: want one of %s, got %q", strings.Join(provider.ReasoningEfforts, ", "), c.ReasoningEffort)
	}
	if c.ServiceTier != "" && !slices.Contains(provider.ServiceTiers, c.ServiceTier) {
		return fmt.Errorf("--service-tier: want one of %s, got %q", strings.Join(provider.ServiceTiers, ", "), c.ServiceTier)
	}
	if err := InRange("--max-completion-tokens", c.MaxCompletionTokens, 1, provider.MaxCompletionTokens, "the label's room"); err != nil {
		return err
	}
	if !chat && (c.ReasoningEffort != "" || c.ServiceTier != "" || c.MaxCompletionTokens != 0) {
		return errors.New("--reasoning-effort, --max-completion-tokens and --service-tier are for --provider chat (or a chat:MODEL --fallback-model)")
	}
	if c.ServiceTier == "flex" && !c.given("timeout") {
		// OpenAI's flex guide: answers take long; give a call 15 minutes.
		// A 429 "resource unavailable" is retried as every 429 is.
		c.Timeout = max(c.Timeout, FlexTimeout)
	}
	return nil
}

// FlexTimeout is --timeout's default with --service-tier flex, as
// OpenAI's guide to the flex tier advises.
const FlexTimeout = 15 * time.Minute
