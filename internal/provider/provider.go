// Package provider holds the model clients (the Hugging Face HTTP API and the
// embedded offline model) behind one small interface, and the error table
// that turns every provider failure into a stable outcome code.
//
// Retries, limits, the breaker and fallback live in package resilience and
// wrap a Classifier; nothing here retries.
package provider

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"
)

// SampleText is the short, harmless text sent when hfsent itself must ask
// the endpoint something (check, and the test of an endpoint that refused
// the first texts of a run).
const SampleText = "The repair was quick and the staff were friendly."

// Prediction is the top label for one text.
type Prediction struct {
	Label string
	// Score is the label's probability; NaN when the provider gave none (a
	// chat model answering without logprobs): written blank.
	Score float64
	// Usage is the tokens the text's call cost, when the provider says.
	Usage Usage
	// Scores are the labels the answer scored, best first (--top-k and
	// --multi-label write them): a text-classification or zero-shot
	// model's every label, a chat model's labels found in its first
	// token's logprobs, the local model's three. nil when it scored none.
	Scores []LabelScore
}

// LabelScore is a label and the score an answer gave it.
type LabelScore struct {
	Label string
	Score float64
}

// SortScores sorts s best first; ties keep their order.
func SortScores(s []LabelScore) {
	slices.SortStableFunc(s, func(a, b LabelScore) int { return cmp.Compare(b.Score, a.Score) })
}

// Usage is what a call cost in tokens, as an OpenAI-style server's "usage"
// reports it. Known is false when it reported none (and for the
// text-classification and local providers).
type Usage struct {
	Prompt, Completion int
	Known              bool
	// Cached is how many of the Prompt tokens the server read from its
	// prompt cache (OpenAI's usage.prompt_tokens_details.cached_tokens,
	// and other servers' names for it): part of Prompt, never more, and
	// priced at the cached rate where one is known.
	Cached int
	// Cost is what the server itself said the call cost, in USD, when it
	// says (OpenRouter's usage.cost): the spend ledger takes it over any
	// price. Costed is false when it said nothing.
	Cost   float64
	Costed bool
	// Reasoning is how many of the completion tokens a reasoning model
	// spent reasoning (completion_tokens_details.reasoning_tokens): they
	// are in Completion, and priced as output as OpenAI bills them.
	Reasoning int
	// Tier is the service tier that served the call, as its answer said
	// ("flex" or "priority"; "" the default), which prices it.
	Tier string
}

// MaxTokens is the most tokens a count holds: a server's usage above it is
// read as it, and sums stop there (they saturate, never wrap), so that a
// count fits wherever it is stored (the queue keeps 32 bits).
const MaxTokens = math.MaxInt32

// Total is prompt plus completion tokens, at most MaxTokens.
func (u Usage) Total() int { return SatAdd(u.Prompt, u.Completion) }

// Add sums two usages, each count at most MaxTokens; the sum is known (or
// costed) when either is.
func (u Usage) Add(v Usage) Usage {
	s := Usage{Prompt: SatAdd(u.Prompt, v.Prompt), Completion: SatAdd(u.Completion, v.Completion), Known: u.Known || v.Known,
		Cost: u.Cost + v.Cost, Costed: u.Costed || v.Costed, Reasoning: SatAdd(u.Reasoning, v.Reasoning),
		Cached: SatAdd(u.Cached, v.Cached)}
	switch {
	case !u.Known && !u.Costed:
		s.Tier = v.Tier
	case !v.Known && !v.Costed || u.Tier == v.Tier:
		s.Tier = u.Tier
	} // a sum of calls served by different tiers has none
	return s
}

// SatAdd is a+b for token counts in [0, MaxTokens]: at most MaxTokens,
// never negative.
func SatAdd(a, b int) int {
	a, b = min(max(a, 0), MaxTokens), min(max(b, 0), MaxTokens)
	return min(a+b, MaxTokens)
}

// Answer is what one Classify call returns on success.
type Answer struct {
	// Predictions holds exactly one entry per input text, in order.
	Predictions []Prediction
	// Model names the model that answered, when the server said (it may
	// differ from the configured one).
	Model string
	// Limits is what the server's rate-limit headers said with the answer
	// (x-ratelimit-remaining-tokens and the like); zero when it sent none.
	Limits Limits
}

// Usage is the tokens the whole call cost.
func (a Answer) Usage() Usage {
	var u Usage
	for _, p := range a.Predictions {
		u = u.Add(p.Usage)
	}
	return u
}

// Call is one call to a provider: the texts, and what the policies ask of
// this attempt. It is passed explicitly (as failsafe-go passes its
// Execution), never in the context, which carries only the call's
// cancellation and deadline.
type Call struct {
	// Texts holds the texts to label, at least one.
	Texts []string
	// WaitForModel asks an HF server to hold the call while a loading model
	// comes up (it sends X-Wait-For-Model: 1).
	WaitForModel bool
	// AttemptTimeout lets this attempt take up to that long when it is
	// longer than the client's timeout: a call that asks the server to hold
	// it while a model loads must be allowed to wait for it.
	AttemptTimeout time.Duration
	// ScaleUp asks an endpoint other than the router to hold the call until
	// a replica is up (X-Scale-Up-Timeout: the seconds left before ctx's
	// deadline), and gives the attempt that long: the proxy of an Inference
	// Endpoint scaled to zero then holds it, instead of answering 503.
	ScaleUp bool
	// Unlabelled, when set, is what the row's last call answered (a chat
	// model's answer that named no label: Error.Answer): the client says
	// so and asks again, so that the second call is not the first's bytes
	// again (at temperature 0 those get the same answer back).
	Unlabelled *string
}

// Classifier labels texts: one attempt per Classify, never retried.
// Implementations must be safe for concurrent use. On failure the error is
// a *Error (or the context's error when ctx ended).
type Classifier interface {
	Classify(ctx context.Context, call Call) (Answer, error)
	// Model names the model this classifier asks.
	Model() string
}

// attemptTimeout is how long an attempt may take: the client's timeout d,
// or the call's own when it is longer.
func (c Call) attemptTimeout(d time.Duration) time.Duration {
	return max(d, c.AttemptTimeout)
}

// TokenEstimator is a client that can guess, before a call, the tokens it
// will cost (the chat client): a token limit reserves the guess, then
// corrects it with the usage reported.
type TokenEstimator interface {
	EstimateTokens(texts []string) int
}

// TextChecker is a client that can tell, before any call, that a text
// cannot be sent (the chat client: its prompt would be over
// MaxPromptBytes). The error is an *Error, invalid_input: the row's own.
type TextChecker interface {
	CheckText(text string) error
}

// Requester is a client that can show, before any call, the exact request
// it would send now for one text alone: the URL (credentials redacted) and
// the body, byte for byte what Classify would post. The response cache keys
// a row by it, and a Batch API submission sends that body, so the two can
// never drift from the live call.
type Requester interface {
	Request(text string) (url string, body []byte, err error)
}
