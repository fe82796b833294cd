package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// chatAnswer is what hfsent reads of a chat completion: choices[0]'s
// content, its logprobs, and the usage. Only the content is required: a
// field it does not need (usage, logprobs) that is malformed is ignored,
// never a reason to throw a label away.
type chatAnswer struct {
	content string
	usage   Usage
	// tokens are the answer's tokens with their alternatives; lpOK is false
	// when the logprobs were missing or not usable (a null, NaN or positive
	// logprob, top_logprobs that is not a list): the score is blank then.
	tokens []answerToken
	lpOK   bool
	// finish is choices[0].finish_reason ("" when absent); refusal the
	// message's refusal (a structured-output refusal); noContent is set
	// when content was null (or absent) beside a refusal or a
	// finish_reason, which is an answer, not a malformed one.
	finish, refusal string
	noContent       bool
}

type answerToken struct {
	text string
	alts []answerAlt
}

type answerAlt struct {
	text    string
	logprob float64
}

// answerDoc is the envelope; every field hfsent can do without is kept raw
// and read on its own.
type answerDoc struct {
	Choices []struct {
		Message *struct {
			Content json.RawMessage `json:"content"`
			Refusal json.RawMessage `json:"refusal"`
		} `json:"message"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason json.RawMessage `json:"finish_reason"`
	} `json:"choices"`
	Usage       json.RawMessage `json:"usage"`
	ServiceTier json.RawMessage `json:"service_tier"`
}

// readChatAnswer decodes a 200's body; ok is false when it is not a chat
// completion with a content (what is missing is in why).
func readChatAnswer(body []byte) (a chatAnswer, why string, ok bool) {
	var doc answerDoc
	if err := json.Unmarshal(body, &doc); err != nil {
		// Python servers may write NaN or Infinity, which JSON has not: read
		// them as null (a score they touch is blank), and try again.
		if json.Unmarshal(nonFiniteToNull(body), &doc) != nil {
			return a, "the answer is not JSON", false
		}
	}
	if len(doc.Choices) == 0 || doc.Choices[0].Message == nil {
		return a, "no choices[0].message.content", false
	}
	ch := doc.Choices[0]
	a.finish, a.refusal = rawString(ch.FinishReason), rawString(ch.Message.Refusal)
	content, ok := readContent(ch.Message.Content)
	if !ok && a.refusal == "" && a.finish == "" {
		return a, "no choices[0].message.content", false
	}
	a.content, a.noContent = content, !ok
	a.usage = readUsage(doc.Usage)
	a.usage.Tier = tierOf(rawString(doc.ServiceTier))
	a.tokens, a.lpOK = readLogprobs(ch.Logprobs)
	return a, "", true
}

// rawString is raw as a string, "" when it is not one (null, absent).
func rawString(raw json.RawMessage) string {
	var s string
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// tierOf is an answer's service_tier as the ledger prices it: one of
// ServiceTiers ("scale" and anything else read as "": the default price).
func tierOf(s string) string {
	switch s = strings.ToLower(strings.TrimSpace(s)); s {
	case "flex", "priority":
		return s
	}
	return ""
}

// readContent reads a message's content: a string, or a list of parts
// ([{"type": "text", "text": ...}], as some servers answer), whose texts
// are joined. null, or anything else, is no content.
func readContent(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil && !isNull(raw) {
		return s, true
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil || isNull(raw) {
		return "", false
	}
	var b strings.Builder
	found := false
	for _, p := range parts {
		if p.Text != nil && (p.Type == "" || p.Type == "text" || p.Type == "output_text") {
			b.WriteString(*p.Text)
			found = true
		}
	}
	return b.String(), found
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// readUsage reads usage's prompt_tokens and completion_tokens: integers,
// or what reads as one (10.0, "12"); a count that is not a whole number,
// or negative, is ignored, and one above MaxTokens is read as MaxTokens.
// Known when either count was read.
func readUsage(raw json.RawMessage) Usage {
	var doc struct {
		Prompt     json.RawMessage `json:"prompt_tokens"`
		Completion json.RawMessage `json:"completion_tokens"`
		// Cost is what the server says the call cost, in USD
		// (OpenRouter's usage.cost): the spend ledger takes it over any
		// price.
		Cost json.RawMessage `json:"cost"`
		// Details holds reasoning_tokens (a reasoning model's, counted in
		// completion_tokens and billed as output).
		Details struct {
			Reasoning json.RawMessage `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
		// The prompt tokens read from the server's prompt cache, under
		// each server's name for them: OpenAI's (and vLLM's, the router's)
		// prompt_tokens_details.cached_tokens, DeepSeek's
		// prompt_cache_hit_tokens, Anthropic's cache_read_input_tokens.
		PromptDetails struct {
			Cached json.RawMessage `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		CacheHit  json.RawMessage `json:"prompt_cache_hit_tokens"`
		CacheRead json.RawMessage `json:"cache_read_input_tokens"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &doc) != nil {
		return Usage{}
	}
	var u Usage
	if n, ok := tokenCount(doc.Prompt); ok {
		u.Prompt, u.Known = n, true
	}
	if n, ok := tokenCount(doc.Completion); ok {
		u.Completion, u.Known = n, true
	}
	if f, ok := usageNumber(doc.Cost); ok {
		u.Cost, u.Costed = f, true
	}
	if n, ok := tokenCount(doc.Details.Reasoning); ok {
		u.Reasoning = n
	}
	for _, raw := range []json.RawMessage{doc.PromptDetails.Cached, doc.CacheHit, doc.CacheRead} {
		if n, ok := tokenCount(raw); ok && u.Known {
			// Part of the prompt: a count over it is not believed past it,
			// so that no token is counted twice.
			u.Cached = min(n, u.Prompt)
			break
		}
	}
	return u
}

// maxCallCost bounds a cost a server reports for one call, in USD: a
// larger figure is not a price but a broken (or hostile) field, ignored.
const maxCallCost = 1e6

// usageNumber reads a number sent as a number or a string of one: finite,
// not negative; ok is false otherwise.
func usageNumber(raw json.RawMessage) (float64, bool) {
	text, ok := numberText(raw)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > maxCallCost {
		return 0, false
	}
	return f, true
}

// numberText is the text of a number sent as a number or as a string of
// one; ok is false for nothing, null, or a string that cannot be read.
func numberText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || isNull(raw) {
		return "", false
	}
	if raw[0] != '"' {
		return string(raw), true
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return strings.TrimSpace(s), true
}

// tokenCount reads a count sent as a number or a string of one.
func tokenCount(raw json.RawMessage) (int, bool) {
	text, ok := numberText(raw)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(f) || f < 0 || f != math.Trunc(f) {
		return 0, false
	}
	return int(min(f, MaxTokens)), true
}

// readLogprobs reads choices[0].logprobs.content: each token, and its
// top_logprobs. ok is false when there are none, or when any is unusable.
func readLogprobs(raw json.RawMessage) ([]answerToken, bool) {
	if len(raw) == 0 || isNull(raw) {
		return nil, false
	}
	var doc struct {
		Content []struct {
			Token       *string         `json:"token"`
			Logprob     json.RawMessage `json:"logprob"`
			TopLogprobs json.RawMessage `json:"top_logprobs"`
		} `json:"content"`
	}
	if json.Unmarshal(raw, &doc) != nil || len(doc.Content) == 0 {
		return nil, false
	}
	out := make([]answerToken, 0, len(doc.Content))
	for _, t := range doc.Content {
		if t.Token == nil {
			return nil, false
		}
		if _, ok := logprobOf(t.Logprob); !ok {
			return nil, false
		}
		var alts []struct {
			Token   *string         `json:"token"`
			Logprob json.RawMessage `json:"logprob"`
		}
		if tl := bytes.TrimSpace(t.TopLogprobs); len(tl) > 0 && !isNull(tl) {
			if tl[0] != '[' || json.Unmarshal(tl, &alts) != nil {
				return nil, false
			}
		}
		at := answerToken{text: *t.Token, alts: make([]answerAlt, 0, len(alts))}
		for _, a := range alts {
			lp, ok := logprobOf(a.Logprob)
			if !ok || a.Token == nil {
				return nil, false
			}
			at.alts = append(at.alts, answerAlt{text: *a.Token, logprob: lp})
		}
		out = append(out, at)
	}
	return out, true
}

// logprobRounding is how far above 0 a logprob may be and still be read as
// 0: a probability of 1 rounded up in float32.
const logprobRounding = 1e-6

// logprobOf reads a logprob: a number at most 0 (up to rounding). null,
// NaN (read as null) or a positive value is no logprob.
func logprobOf(raw json.RawMessage) (float64, bool) {
	var f *float64
	if json.Unmarshal(raw, &f) != nil || f == nil || math.IsNaN(*f) || *f > logprobRounding {
		return 0, false
	}
	return min(*f, 0), true
}

// nonFiniteToNull rewrites the bare NaN, Infinity and -Infinity that
// Python's json module writes (outside strings) as null.
func nonFiniteToNull(b []byte) []byte {
	out := make([]byte, 0, len(b))
	inString, escaped := false, false
	for i := 0; i < len(b); i++ {
		ch := b[i]
		if inString {
			out = append(out, ch)
			switch {
			case escaped:
				escaped = false
			case ch == '\\':
				escaped = true
			case ch == '"':
				inString = false
			}
			continue
		}
		if ch == '"' {
			inString = true
			out = append(out, ch)
			continue
		}
		matched := false
		for _, w := range []string{"-Infinity", "Infinity", "NaN"} {
			if bytes.HasPrefix(b[i:], []byte(w)) {
				out = append(out, "null"...)
				i += len(w) - 1
				matched = true
				break
			}
		}
		if !matched {
			out = append(out, ch)
		}
	}
	return out
}

// answerForm is what an answer looked like, which says whether the
// server's constraint held.
type answerForm uint8

const (
	formText answerForm = iota // plain text: no JSON object
	formJSON                   // a JSON object (whole or not)
)

// label is the label an answer names (-1 if none; several when it names
// more than one): {"label": ...} with any whitespace, or a bare label (a
// server that ignored the constraint), always one of --labels.
func (c *Chat) label(content string) (i int, several bool, form answerForm) {
	t := strings.TrimSpace(stripThink(content))
	if strings.HasPrefix(t, "{") {
		var doc map[string]json.RawMessage
		var v string
		if json.Unmarshal([]byte(t), &doc) != nil || json.Unmarshal(doc["label"], &v) != nil {
			return -1, false, formJSON
		}
		for i, l := range c.labels {
			if v == l {
				return i, false, formJSON
			}
		}
		i, several := c.match(v)
		return i, several, formJSON
	}
	i, several = c.match(content)
	return i, several, formText
}

// labelStart matches what comes before the label in a JSON answer.
var labelStart = regexp.MustCompile(`^\s*\{\s*"label"\s*:\s*"`)

// constrainedDist is every label's probability under a constraint (the
// chosen one's is its score): the server reports the model's distribution
// before its grammar, so the label's token is found (past {"label":" for
// JSON, the first token otherwise) and its probability normalised over
// the labels' first tokens at that position. nil when the tokens cannot
// be followed, when a label has no alternative there, or when one
// alternative starts two labels (they share a first token: nothing tells
// them apart).
func (c *Chat) constrainedDist(a chatAnswer, k Constraint) []float64 {
	if !a.lpOK {
		return nil
	}
	var text strings.Builder
	for _, t := range a.tokens {
		text.WriteString(t.text)
	}
	at := 0
	if k == ConstrainJSONSchema {
		m := labelStart.FindStringIndex(text.String())
		if m == nil {
			return nil
		}
		at = m[1]
	}
	full := text.String()
	pos := 0
	for _, t := range a.tokens {
		end := pos + len(t.text)
		if t.text != "" && at < end {
			// This token holds the label's first byte (and perhaps the quote
			// before it, merged into one token).
			return c.distOver(t.alts, full[pos:at], k == ConstrainJSONSchema)
		}
		pos = end
	}
	return nil
}

// distOver shares the alternatives' probability out over the labels
// they start, once prefix (the part of the token before the label: a
// quote merged into it) is taken off each: every label's share, nil when
// they say nothing of some label or one starts two.
func (c *Chat) distOver(alts []answerAlt, prefix string, quoted bool) []float64 {
	forms := c.labels
	if quoted {
		forms = c.quoted
	}
	mass := make([]float64, len(forms))
	for _, alt := range alts {
		rest, ok := strings.CutPrefix(alt.text, prefix)
		if !ok || rest == "" {
			continue
		}
		which := -1
		for i, f := range forms {
			if strings.HasPrefix(f, rest) || quoted && strings.HasPrefix(rest, f+`"`) {
				if which >= 0 {
					return nil // the start of two labels
				}
				which = i
			}
		}
		if which >= 0 {
			mass[which] += math.Exp(alt.logprob)
		}
	}
	total := 0.0
	for _, m := range mass {
		if m <= 0 {
			return nil // a label is not there
		}
		total += m
	}
	for i := range mass {
		mass[i] = math.Min(mass[i]/total, 1)
	}
	return mass
}

// dist is every label's probability without a constraint (the chosen
// one's is its score, none when it is 0): the first token of the answer
// that is not a space or a quote, its top_logprobs, each alternative that
// starts exactly one label (or is one) counted for that label, normalised
// over what the labels found there hold. nil when the logprobs are not
// usable.
func (c *Chat) dist(a chatAnswer) []float64 {
	if !a.lpOK {
		return nil
	}
	for _, t := range a.tokens {
		if normalise(t.text) == "" {
			continue // a leading space or quote: the label starts at the next
		}
		mass := make([]float64, len(c.norm))
		total := 0.0
		for _, alt := range t.alts {
			tok := normalise(alt.text)
			if tok == "" {
				continue
			}
			which := -1
			for i, n := range c.norm {
				if strings.HasPrefix(n, tok) || tok == n {
					if which >= 0 {
						which = -2 // the start of several labels: says nothing
						break
					}
					which = i
				}
			}
			if which >= 0 {
				p := math.Exp(alt.logprob)
				mass[which] += p
				total += p
			}
		}
		if total <= 0 {
			return nil
		}
		for i := range mass {
			mass[i] = math.Min(mass[i]/total, 1)
		}
		return mass
	}
	return nil
}

// scoresOf are the labels of a distribution (dist's, distOver's) with a
// share above 0, best first; nil for none.
func (c *Chat) scoresOf(d []float64) []LabelScore {
	var out []LabelScore
	for i, p := range d {
		if p > 0 {
			out = append(out, LabelScore{Label: c.labels[i], Score: p})
		}
	}
	SortScores(out)
	return out
}
