package provider

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/hfsent/hfsent/internal/outcome"
)

// Reasoning models (OpenAI's gpt-5 family and o-series) take the
// completion's cap as max_completion_tokens, refuse max_tokens (400
// unsupported_parameter) and any temperature but the default (400
// unsupported_value), and spend reasoning tokens out of that cap before
// they write a word of the answer. hfsent knows a model is one by its name
// (reasoningPrefixes), by --reasoning-effort, or by the server's refusal of
// max_tokens or temperature, learnt once per run (as --constrain auto
// learns a refused field).

// ReasoningEfforts are --reasoning-effort's values, as OpenAI names them
// (sent as reasoning_effort).
var ReasoningEfforts = []string{"minimal", "low", "medium", "high"}

// ServiceTiers are --service-tier's values (sent as service_tier).
var ServiceTiers = []string{"auto", "default", "flex", "priority"}

// MaxCompletionTokens bounds --max-completion-tokens: OpenAI's largest
// output (gpt-5's 128,000 tokens).
const MaxCompletionTokens = 128000

// reasoningPrefixes are the model names (after any "org/" part) known to
// be reasoning models.
var reasoningPrefixes = []string{"gpt-5", "o1", "o3", "o4"}

// IsReasoningModel reports whether model's name is a known reasoning
// model's: gpt-5*, o1*, o3*, o4*, with or without an "openai/" prefix.
func IsReasoningModel(model string) bool {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range reasoningPrefixes {
		if strings.HasPrefix(m, p) && (len(m) == len(p) || !isAlnum(m[len(p)]) || p == "gpt-5") {
			return true
		}
	}
	return false
}

func isAlnum(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }

// reasoningRoom is the completion's cap for a reasoning model by effort
// ("" is the model's default, medium): room for the reasoning tokens,
// which count toward the cap, besides the label. OpenAI advises leaving
// about 25,000 for hard problems; a label needs far less, and these keep
// the --max-spend reservation of a call within reason.
func reasoningRoom(effort string) int {
	switch effort {
	case "minimal":
		return 1024
	case "low":
		return 4096
	case "high":
		return 25000
	}
	return 8192
}

// IsOpenAI reports whether endpoint is OpenAI's own API
// (api.openai.com), whose documented limits hfsent holds to.
func IsOpenAI(endpoint string) bool { return isOpenAI(endpoint) }

// isOpenAI reports whether endpoint is OpenAI's own API, which takes
// max_completion_tokens for every model (max_tokens is deprecated there).
func isOpenAI(endpoint string) bool {
	u, err := url.Parse(endpoint)
	return err == nil && strings.EqualFold(u.Hostname(), "api.openai.com")
}

// completionCap is the cap a call is sent with under constraint k: the
// label's room (maxTokensFor), or, for a reasoning model, --max-completion-
// tokens or the effort's room above it.
func (c *Chat) completionCap(k Constraint, reasoning bool) int {
	if c.cfg.MaxCompletionTokens > 0 {
		return c.cfg.MaxCompletionTokens
	}
	n := maxTokensFor(k, c.longestRunes, c.longestBytes)
	if reasoning {
		n += reasoningRoom(c.cfg.ReasoningEffort)
	}
	return n
}

// setParams sets req's cap, temperature and the OpenAI fields. A server
// that is neither OpenAI's nor asked a reasoning model gets max_tokens and
// temperature 0, as it always did (its body, and so its cache keys, do not
// change).
func (c *Chat) setParams(req *chatRequest, k Constraint) {
	reasoning := c.reasoning.Load()
	n := c.completionCap(k, reasoning)
	switch {
	case reasoning || c.openAI:
		req.MaxCompletionTokens = n
	default:
		req.MaxTokens = n
	}
	if !reasoning {
		zero := 0.0
		req.Temperature = &zero // the default is 1
	}
	req.ReasoningEffort, req.ServiceTier = c.cfg.ReasoningEffort, c.cfg.ServiceTier
}

// refusesNonReasoning reports whether a 400 says the model is a reasoning
// model: it refuses max_tokens (unsupported_parameter) or a temperature
// (unsupported_value).
func refusesNonReasoning(e *Error) bool {
	if e.Status != 400 {
		return false
	}
	r := strings.ToLower(e.Reason)
	return strings.Contains(r, "max_tokens") && (strings.Contains(r, "unsupported") || strings.Contains(r, "max_completion_tokens")) ||
		strings.Contains(r, "temperature") && strings.Contains(r, "unsupported")
}

// learnReasoning turns the reasoning model's parameters on for the rest
// of the run, after the server's refusal e.
func (c *Chat) learnReasoning(e *Error) {
	c.reasoning.Store(true)
	c.reasoningOnce.Do(func() {
		c.logWarn(fmt.Sprintf("%s refused max_tokens or temperature (HTTP %d: %q): %s is a reasoning model; sending max_completion_tokens and no temperature for the rest of the run (say --reasoning-effort to start so)",
			c.base.host, e.Status, e.Reason, c.cfg.Model))
	})
}

// finishReasons are the finish_reason values OpenAI's API documents.
var finishReasons = []string{"stop", "length", "tool_calls", "content_filter", "function_call"}

// stopped is the error of an answer that is not a label by the model's
// or the provider's choice: a refusal, or an answer the content filter
// stopped (upstream_refused, final: asked again, it answers the same), or
// a null content with no such reason (upstream_payload). Each carries the
// usage, which was billed. nil for an answer to read.
func (c *Chat) stopped(a chatAnswer) *Error {
	if a.finish != "" && !slices.Contains(finishReasons, a.finish) {
		c.finishOnce.Do(func() {
			c.logWarn(fmt.Sprintf("%s answered with finish_reason %q, which hfsent does not know; the answer is read as any other", c.base.host, summarise(a.finish, c.cfg.Token)))
		})
	}
	switch {
	case a.refusal != "":
		return &Error{Outcome: outcome.UpstreamRefused, Status: 200, Usage: a.usage, NoRetry: true,
			Msg: fmt.Sprintf("the model refused to answer: %q", summarise(a.refusal, c.cfg.Token))}
	case a.finish == "content_filter":
		return &Error{Outcome: outcome.UpstreamRefused, Status: 200, Usage: a.usage, NoRetry: true,
			Msg: "the provider's content filter stopped the answer (finish_reason content_filter)"}
	case a.noContent && a.finish == "length":
		return c.cutAtCap(a)
	case a.noContent:
		return &Error{Outcome: outcome.UpstreamPayload, Status: 200, Usage: a.usage,
			Msg: fmt.Sprintf("the answer has no content (finish_reason %q)", summarise(a.finish, c.cfg.Token))}
	}
	return nil
}

// cutAtCap is the error of an answer cut at the completion's cap
// (finish_reason length) before it named a label: upstream_truncated, not
// sent again (the same cap cuts it the same way).
func (c *Chat) cutAtCap(a chatAnswer) *Error {
	n := c.completionCap(c.Constraint(), c.reasoning.Load())
	why := fmt.Sprintf("the answer was cut at the completion cap of %d tokens (finish_reason length)", n)
	if a.usage.Reasoning > 0 {
		why += fmt.Sprintf(", %d of them spent reasoning", a.usage.Reasoning)
	}
	return &Error{Outcome: outcome.UpstreamTruncated, Status: 200, Usage: a.usage, NoRetry: true,
		Answer: clip(a.content, maxAnswer),
		Msg:    why + ": give it room with --max-completion-tokens (or a lower --reasoning-effort)"}
}
