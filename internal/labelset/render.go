package labelset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/hfsent/hfsent/internal/provider"
)

// SingleInstruction is the instruction that opens the fixed part when a
// row gets one label; {labels} becomes the names, comma-separated.
const SingleInstruction = "You are a text classifier. Read the user's text and answer with exactly one of the labels defined below, written as given, and nothing else: {labels}"

// MultiInstruction opens the fixed part when a row may get several
// labels (--multi-label).
const MultiInstruction = "You are a text classifier. Read the user's text and answer with every one of the labels defined below that applies to it, written as given, and nothing else: {labels}"

// System is the fixed part of a chat prompt for the set: the instruction
// ({labels} replaced by the names), the task, each label with its
// description and examples, and the texts that fit none, in the set's
// order. It is sent as the system message, before the row's text (the
// user message), and is the same bytes for every row: a provider's prompt
// cache keys on a prompt's first tokens, so the part that does not change
// must come first and never vary. It depends on nothing but the set and
// the instruction (no map is ranged over, no time or row is in it).
//
// Example texts are written as JSON strings, one a line, so that a text's
// quotes and line breaks cannot be read as the end of it or as the next
// example; a reason follows its example, on the same line.
func (s *Set) System(instruction string) string {
	var b strings.Builder
	b.WriteString(strings.ReplaceAll(instruction, "{labels}", strings.Join(s.Names(), ", ")))
	if s.Task != "" {
		b.WriteString("\n\n# Task\n\n")
		b.WriteString(s.Task)
	}
	b.WriteString("\n\n# Labels")
	for _, l := range s.Labels {
		b.WriteString("\n\n## ")
		b.WriteString(l.Name)
		if l.Description != "" {
			b.WriteString("\n\n")
			b.WriteString(l.Description)
		}
		if len(l.Examples) > 0 {
			b.WriteString("\n\nExamples:")
			writeExamples(&b, l.Examples)
		}
	}
	if len(s.None) > 0 {
		b.WriteString("\n\n# Texts that fit none of the labels\n")
		writeExamples(&b, s.None)
	}
	return b.String()
}

func writeExamples(b *strings.Builder, ex []Example) {
	for _, e := range ex {
		b.WriteString("\n- ")
		b.WriteString(jsonString(e.Text))
		if e.Reason != "" {
			b.WriteString(" (reason: ")
			b.WriteString(strings.Join(strings.Fields(e.Reason), " "))
			b.WriteString(")")
		}
	}
}

// jsonString is s as a JSON string, with <, > and & as they are (the
// prompt is not HTML).
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(s) != nil {
		return fmt.Sprintf("%q", s) // not reached: a string always encodes
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// DefaultHypothesisTemplate is the zero-shot pipeline's own default: the
// sentence it makes of a label name when no template is sent.
const DefaultHypothesisTemplate = "This example is {}."

// MaxTemplateChars bounds a hypothesis template.
const MaxTemplateChars = 1000

// ZeroShot is what a zero-shot request sends for a set: one candidate per
// label, in the set's order, and the hypothesis_template to send with
// them ("" sends none).
type ZeroShot struct {
	Candidates []string
	Template   string
}

// CheckTemplate checks a hypothesis template (--hypothesis-template): UTF-8,
// no control character, at most MaxTemplateChars, exactly one {} and no
// other brace. "" (none) is fine.
func CheckTemplate(t string) error { return checkTemplate(t) }

// ZeroShot is the set as a zero-shot model's hypotheses. A label's
// hypothesis is template with {} replaced by the label's description, or
// by its name when it has none; with no template, it is the description
// as written, or DefaultHypothesisTemplate of the name. The candidates are
// then the hypotheses and the template sent "{}", so the server takes
// them as they are (it fills a template with Python's str.format, which a
// brace in a description would break).
//
// A set with no description and no template sends its names and no
// template: today's zero-shot request, byte for byte, so that the
// response cache's entries for it stay valid.
func (s *Set) ZeroShot(template string) (ZeroShot, error) {
	if err := checkTemplate(template); err != nil {
		return ZeroShot{}, err
	}
	if template == "" && !s.Described() {
		return ZeroShot{Candidates: s.Names()}, nil
	}
	z := ZeroShot{Candidates: make([]string, len(s.Labels)), Template: "{}"}
	seen := map[string]int{}
	for i, l := range s.Labels {
		switch {
		case template != "" && l.Description != "":
			z.Candidates[i] = strings.ReplaceAll(template, "{}", l.Description)
		case template != "":
			z.Candidates[i] = strings.ReplaceAll(template, "{}", l.Name)
		case l.Description != "":
			z.Candidates[i] = l.Description
		default:
			z.Candidates[i] = strings.ReplaceAll(DefaultHypothesisTemplate, "{}", l.Name)
		}
		if j, ok := seen[z.Candidates[i]]; ok {
			return ZeroShot{}, fmt.Errorf("labels %q and %q have the same hypothesis, %q: a zero-shot answer could not tell them apart", s.Labels[j].Name, l.Name, clip(z.Candidates[i]))
		}
		seen[z.Candidates[i]] = i
	}
	return z, nil
}

// Index is the label (its index in the set) a zero-shot answer's label
// stands for, or -1.
func (z ZeroShot) Index(candidate string) int {
	for i, c := range z.Candidates {
		if c == candidate {
			return i
		}
	}
	return -1
}

func checkTemplate(t string) error {
	switch {
	case t == "":
		return nil
	case !utf8.ValidString(t):
		return errors.New("the hypothesis template is not UTF-8")
	case utf8.RuneCountInString(t) > MaxTemplateChars:
		return fmt.Errorf("the hypothesis template is over %d characters", MaxTemplateChars)
	case strings.Count(t, "{}") != 1:
		return fmt.Errorf("the hypothesis template %q holds {} %d times: it takes exactly one, where the label goes", clip(t), strings.Count(t, "{}"))
	case strings.ContainsAny(strings.Replace(t, "{}", "", 1), "{}"):
		// The server fills the template with Python's str.format: any
		// other brace is a field it fails on, or one it fills.
		return fmt.Errorf("the hypothesis template %q holds a brace besides its {}: the server would read it as a field of the template", clip(t))
	}
	for _, r := range t {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			return fmt.Errorf("the hypothesis template holds the control character %U", r)
		}
	}
	return nil
}

// CacheRule is when a provider's prompt cache takes a prompt's prefix: from
// Min tokens, in steps of Step tokens past it.
type CacheRule struct {
	Provider  string
	Min, Step int
}

// OpenAICache is OpenAI's rule: prompts of 1,024 tokens or more are
// cached, and a hit covers the longest cached prefix of 1,024 tokens and a
// multiple of 128 more.
func OpenAICache() CacheRule { return CacheRule{Provider: "OpenAI", Min: 1024, Step: 128} }

// Prefix is an estimate of the fixed part's tokens against a cache rule.
type Prefix struct {
	Bytes  int
	Tokens int // estimated, as the dry run estimates a prompt (provider.EstimateText)
	Rule   CacheRule
	// Cached is the tokens of the prefix a hit would cover under the rule
	// (0 under Min): what each row after the first could pay at the cached
	// rate.
	Cached int
}

// Reaches reports whether the estimate reaches the rule's minimum.
func (p Prefix) Reaches() bool { return p.Tokens >= p.Rule.Min }

// Near reports whether the estimate is within a fifth of the minimum:
// the estimate is a rule of thumb (some 10-20% off on English prose, more
// on other scripts and code), so the provider may count either side of it.
func (p Prefix) Near() bool {
	return 5*p.Tokens >= 4*p.Rule.Min && 5*p.Tokens < 6*p.Rule.Min
}

// EstimatePrefix estimates the tokens of a fixed part (System's string)
// with the estimate the dry run uses for every prompt, and what a cache
// under rule would take of it. The few tokens a chat template adds around
// the message are left out.
func EstimatePrefix(system string, rule CacheRule) Prefix {
	p := Prefix{Bytes: len(system), Tokens: provider.EstimateText(system), Rule: rule}
	if p.Reaches() {
		p.Cached = rule.Min
		if rule.Step > 0 {
			p.Cached += (p.Tokens - rule.Min) / rule.Step * rule.Step
		}
	}
	return p
}
