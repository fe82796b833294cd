package provider

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// UsageEstimator is a client that can guess, before a call, the tokens a
// call for one text will cost: expected is a central guess (what a dry
// run adds up), bound a generous one that a call seldom passes (what
// --max-spend reserves while the call is in flight). Both are read from
// the very request the call would send (Requester), so they follow every
// field the body gains.
type UsageEstimator interface {
	EstimateUsage(text string) (expected, bound Usage)
}

// Chat's template costs, as OpenAI's guide to counting tokens puts them:
// about three tokens a message for its role and separators, and three
// that prime the reply.
const (
	tokensPerMessage = 3
	tokensPerReply   = 3
)

// EstimateUsage implements UsageEstimator. The prompt is the messages'
// contents at EstimateText's rate, plus the template; the completion one
// of the labels (their mean) and a full stop, within max_tokens. The bound
// counts a token per three bytes and the whole of max_tokens.
func (c *Chat) EstimateUsage(text string) (expected, bound Usage) {
	_, body, err := c.Request(text)
	if err != nil {
		return Usage{}, Usage{}
	}
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		MaxTokens           int `json:"max_tokens"`
		MaxCompletionTokens int `json:"max_completion_tokens"`
	}
	if json.Unmarshal(body, &req) != nil {
		return Usage{}, Usage{}
	}
	req.MaxTokens = max(req.MaxTokens, req.MaxCompletionTokens)
	expected.Prompt, bound.Prompt = tokensPerReply, tokensPerReply
	for _, m := range req.Messages {
		var s string
		if json.Unmarshal(m.Content, &s) != nil {
			s = string(m.Content) // parts, not a string: counted as written
		}
		expected.Prompt += EstimateText(s) + tokensPerMessage
		bound.Prompt += len(s)/3 + 1 + tokensPerMessage
	}
	n := 0
	inObject := c.Constraint() == ConstrainJSONSchema
	for _, l := range c.labels {
		if inObject {
			// The schema's answer is the label in an object: {"label": "…"}.
			n += EstimateText(`{"label": "`+l+`"}`) + 1
			continue
		}
		n += EstimateText(l) + 1 // and a full stop, or a closing quote
	}
	expected.Completion = (n + len(c.labels)/2) / max(1, len(c.labels))
	bound.Completion = max(req.MaxTokens, expected.Completion)
	if req.MaxTokens > 0 {
		expected.Completion = min(expected.Completion, req.MaxTokens)
	}
	expected.Known, bound.Known = true, true
	// Priced at the tier asked for (--service-tier flex or priority): the
	// answer says which tier served it, and a dry run or a spending
	// limit's reservation has only the request to go on ("auto" and
	// "default": the standard price).
	expected.Tier = tierOf(c.cfg.ServiceTier)
	bound.Tier = expected.Tier
	return expected, bound
}

// EstimateText is about how many tokens an English BPE tokenizer (OpenAI's,
// Llama's) makes of s: the mean of OpenAI's two rules of thumb, a token
// per four characters and four tokens per three words. Text in other
// scripts, code and numbers take more; see the cost guide.
func EstimateText(s string) int {
	if s == "" {
		return 0
	}
	chars := utf8.RuneCountInString(s)
	words := len(strings.FieldsFunc(s, unicode.IsSpace))
	return max(1, (3*chars+16*words+12)/24) // (chars/4 + 4·words/3) / 2, rounded
}
