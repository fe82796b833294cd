package provider

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Constraint is how a chat server is made to answer with one of the labels
// (structured outputs): the grammar it is asked to decode under, in the
// request's own field for each server. The order is the one --constrain
// auto moves down: json-schema, then regex, then choice, then off.
type Constraint int32

const (
	// ConstrainOff asks nothing: the answer is read as plain text.
	ConstrainOff Constraint = iota
	// ConstrainChoice is vLLM's structured_outputs {"choice": [...]}: the
	// answer is one of the labels, from its first token.
	ConstrainChoice
	// ConstrainRegex is TGI's grammar, response_format {"type": "regex",
	// "value": "(a|b|c)"}: the answer is one of the labels.
	ConstrainRegex
	// ConstrainJSONSchema is OpenAI's structured outputs, response_format
	// {"type": "json_schema", "json_schema": {"name", "strict", "schema"}}
	// with an object of one "label" enum: OpenAI, the router's providers,
	// vLLM, llama.cpp's server and Ollama take it.
	ConstrainJSONSchema
)

// ConstrainNames are --constrain's values, auto first (the default).
var ConstrainNames = []string{"auto", "json-schema", "choice", "regex", "off"}

// ParseConstrain reads --constrain: the constraint to start with, and
// whether the run may move down from it (auto).
func ParseConstrain(s string) (start Constraint, auto bool, err error) {
	switch s {
	case "", "auto":
		return ConstrainJSONSchema, true, nil
	case "json-schema":
		return ConstrainJSONSchema, false, nil
	case "choice":
		return ConstrainChoice, false, nil
	case "regex":
		return ConstrainRegex, false, nil
	case "off":
		return ConstrainOff, false, nil
	}
	return 0, false, fmt.Errorf("want one of %s, got %q", strings.Join(ConstrainNames, ", "), s)
}

// String is the constraint's --constrain name.
func (k Constraint) String() string {
	switch k {
	case ConstrainJSONSchema:
		return "json-schema"
	case ConstrainChoice:
		return "choice"
	case ConstrainRegex:
		return "regex"
	}
	return "off"
}

// Field names the request field the constraint is sent in, for messages.
func (k Constraint) Field() string {
	switch k {
	case ConstrainJSONSchema:
		return `response_format {"type": "json_schema"} (OpenAI's structured outputs)`
	case ConstrainChoice:
		return `structured_outputs {"choice": [...]} (vLLM's)`
	case ConstrainRegex:
		return `response_format {"type": "regex"} (TGI's grammar)`
	}
	return "no constraint: the answer is read as plain text"
}

// fieldWords are words a server's refusal of the constraint's field names
// it by: TGI's 422 says "response_format: missing field `value`" for
// OpenAI's form, or "grammar is not supported"; vLLM's pydantic error
// names response_format; OpenAI's "Unrecognized request argument
// supplied: structured_outputs".
func (k Constraint) fieldWords() []string {
	switch k {
	case ConstrainJSONSchema:
		return []string{"response_format", "json_schema", "grammar"}
	case ConstrainRegex:
		return []string{"response_format", "regex", "grammar"}
	case ConstrainChoice:
		return []string{"structured_outputs"}
	}
	return nil
}

// constraintFields are the request fields each constraint adds, encoded
// once for the run.
type constraintFields struct {
	jsonSchema, regex, choice json.RawMessage
}

func newConstraintFields(labels []string) constraintFields {
	var f constraintFields
	enum, _ := json.Marshal(labels)
	// strict: OpenAI then decodes under the schema; additionalProperties
	// false and required are what strict asks of an object.
	f.jsonSchema = json.RawMessage(`{"type":"json_schema","json_schema":{"name":"label","strict":true,"schema":` +
		`{"type":"object","properties":{"label":{"type":"string","enum":` + string(enum) + `}},` +
		`"required":["label"],"additionalProperties":false}}}`)
	alts := make([]string, len(labels))
	for i, l := range labels {
		alts[i] = regexp.QuoteMeta(l)
	}
	f.regex, _ = json.Marshal(map[string]string{"type": "regex", "value": "(" + strings.Join(alts, "|") + ")"})
	f.choice, _ = json.Marshal(map[string][]string{"choice": labels})
	return f
}

// apply sets the constraint k's field on req.
func (f constraintFields) apply(req *chatRequest, k Constraint) {
	switch k {
	case ConstrainJSONSchema:
		req.ResponseFormat = f.jsonSchema
	case ConstrainRegex:
		req.ResponseFormat = f.regex
	case ConstrainChoice:
		req.StructuredOutputs = f.choice
	}
}

// jsonGrammarRoom is the completion tokens an answer {"label": "..."} may
// take beyond its label under a server's JSON grammar: llama.cpp's (which
// Ollama uses) lets a newline and up to 20 spaces or tabs stand between
// any two tokens, a token may be one byte, and there are four places
// between `{`, the key, `:`, the value and `}` (the space after `}` needs
// no room: the object is whole by then); then the 12 bytes of
// {"label":""}, and a few to spare. At 12 tokens, 0 answers of 20 were
// whole on Ollama.
const jsonGrammarRoom = 4*21 + 12 + 8

// maxTokensFor is the completion's cap under k for labels whose longest is
// runes characters and bytes bytes long: room for the longest label (a
// token is at least a byte under a grammar) and, for JSON, its wrapping.
func maxTokensFor(k Constraint, runes, bytes int) int {
	switch k {
	case ConstrainJSONSchema:
		return min(bytes+jsonGrammarRoom, 1024)
	case ConstrainChoice, ConstrainRegex:
		return min(bytes+4, 1024)
	}
	// Unconstrained: a token is at least one character for the words labels
	// are made of: the longest label's characters, and a few for a quote or
	// a full stop.
	return min(runes+4, 256)
}

// refusesConstraint reports whether a 4xx says the server does not take
// the constraint k's field.
func refusesConstraint(e *Error, k Constraint) bool {
	if k == ConstrainOff || e.Status < 400 || e.Status >= 500 || e.Status == 401 || e.Status == 403 || e.Status == 404 || e.Status == 408 || e.Status == 429 {
		return false
	}
	r := strings.ToLower(e.Reason)
	for _, w := range k.fieldWords() {
		if strings.Contains(r, w) {
			return true
		}
	}
	return false
}

// stepDown moves the run's constraint down from k, once: the next
// constraint, or off after the last. Rows that met the refusal together
// move it once; it is said once per move.
func (c *Chat) stepDown(k Constraint, pe *Error) {
	if !c.constraint.CompareAndSwap(int32(k), int32(k-1)) {
		return // another row moved it already
	}
	next := k - 1
	how := "asking with " + next.String() + ", " + next.Field()
	if next == ConstrainOff {
		how = "asking without a constraint (" + next.Field() + ")"
	}
	c.logWarn(fmt.Sprintf("%s refused --constrain %s, %s (HTTP %d: %q); %s for the rest of the run (--constrain auto)",
		c.base.host, k, k.Field(), pe.Status, pe.Reason, how))
}

// refusedMsg is the error of a row whose server refused the constraint the
// run was told to use (not auto).
func refusedMsg(k Constraint) string {
	return fmt.Sprintf("the server refuses --constrain %s (%s): set --constrain auto, another one, or off", k, k.Field())
}

// Constraint is the constraint the calls are sent with now: the one
// --constrain gave, or where auto moved down to.
func (c *Chat) Constraint() Constraint { return Constraint(c.constraint.Load()) }

func (c *Chat) logWarn(msg string) {
	if c.cfg.Logger != nil {
		c.cfg.Logger.Warn(msg)
	}
}
