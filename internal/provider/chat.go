package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/visible"
)

// DefaultChatEndpoint is Hugging Face Inference Providers' OpenAI-compatible
// Chat Completions route; --model takes the router's ids, with an optional
// ":provider" suffix.
const DefaultChatEndpoint = "https://router.huggingface.co/v1/chat/completions"

// Labels bounds --labels.
const (
	MinLabels = 2
	MaxLabels = 100
	// MaxLabelLen bounds a label, in characters: a label is a word or
	// a few, and max_tokens is sized by the longest.
	MaxLabelLen = 100
)

// MaxTopLogprobs is the most top_logprobs OpenAI accepts; other servers
// take as many or refuse, and a refusal turns logprobs off (see Chat).
const MaxTopLogprobs = 20

// ChatConfig configures a Chat client.
type ChatConfig struct {
	Model    string
	Endpoint string // full URL of /v1/chat/completions; "" is DefaultChatEndpoint
	Token    string // may be empty with a custom endpoint
	// Labels are the answers allowed, as written by the operator (2 to
	// MaxLabels, distinct once normalised: CheckLabels).
	Labels []string
	// Prompt, when set, is a template with {labels} and {text} sent as the
	// one user message instead of the default instruction and the text.
	Prompt string
	// System, when set, is the fixed part of the prompt (a label file
	// rendered: instruction, labels, descriptions, examples), sent as the
	// system message in place of the default instruction, the row's text
	// after it. It is the same bytes for every row, so that a provider's
	// prompt cache can reuse it. Not with Prompt.
	System string
	// MultiLabel asks for every label that applies (--multi-label): the
	// structured output is an array of the labels' enum, at least one
	// unless AllowNone; the answer's labels are joined by MultiSeparator,
	// in the labels' order, with no score.
	MultiLabel, AllowNone bool
	// Constrain is --constrain: how the server is made to choose a label
	// (ParseConstrain; "" is auto).
	Constrain string
	// ReadContext asks the server, after its first answer, what context it
	// gives the model (Ollama's and vLLM's APIs), so that a prompt it cut
	// to fit is told apart from a whole one. Not for the router, which
	// has no such API.
	ReadContext bool
	// ReasoningEffort is --reasoning-effort ("" sends none): it also says
	// the model is a reasoning model. MaxCompletionTokens is
	// --max-completion-tokens (0: the label's room, and a reasoning
	// model's effort's). ServiceTier is --service-tier ("" sends none).
	ReasoningEffort     string
	MaxCompletionTokens int
	ServiceTier         string
	Concurrency         int
	Timeout             time.Duration
	ConnectTimeout      time.Duration
	UserAgent           string
	BillTo              string
	Client              *http.Client
	Logger              *slog.Logger
}

// Chat classifies a text by asking an OpenAI-compatible chat model to
// answer with one of a fixed set of labels. It is a small typed client of
// its own on the shared transport (NewHTTPClient), not an SDK's, because
// every policy needs what an SDK hides or does itself: one attempt per call
// (the guard retries), the error table, and the rate-limit headers.
type Chat struct {
	cfg    ChatConfig
	base   *HF // the transport, the headers and the status table it shares
	labels []string
	norm   []string // labels normalised, as answers are compared
	quoted []string // labels as JSON writes them inside a string
	// maxTokens is the completion's cap under the constraint the run
	// starts with (the largest it will send), as the token estimate counts
	// it; topLogprobs asks for every label among the first token's
	// alternatives, up to OpenAI's 20.
	maxTokens, topLogprobs int
	longestRunes           int // the longest label, in characters
	longestBytes           int // and in bytes
	labelsText             string
	// A call's messages hold fixedLen bytes and the text textCount times
	// (promptBytes): the template's {text}s, or the instruction and the
	// text once.
	fixedLen, textCount int
	// noLogprobs is set, once per run, when the server refused logprobs.
	noLogprobs atomic.Bool
	warnOnce   sync.Once
	// constraint is the Constraint calls are sent with; auto lets a
	// refusal move it down (stepDown). fields are each one's request field.
	constraint  atomic.Int32
	auto        bool
	fields      constraintFields
	ignoredOnce sync.Once // the warning that the server ignores it
	// The server's context, read once after the first answer.
	ctxOnce   sync.Once
	serverCtx atomic.Pointer[ServerContext]
	// reasoning is set when the model is a reasoning model (its name,
	// --reasoning-effort, or the server's refusal, learnt once: reasoning.go);
	// openAI when the endpoint is OpenAI's API, which takes
	// max_completion_tokens for every model.
	reasoning     atomic.Bool
	reasoningOnce sync.Once
	openAI        bool
	// finishOnce logs the first finish_reason hfsent does not know.
	finishOnce sync.Once
}

// NewChat returns a client for cfg.
func NewChat(cfg ChatConfig) (*Chat, error) {
	if err := CheckLabels(cfg.Labels); err != nil {
		return nil, err
	}
	if cfg.Prompt != "" && !strings.Contains(cfg.Prompt, "{text}") {
		return nil, errors.New("the prompt template has no {text}")
	}
	ep := cfg.Endpoint
	if ep == "" {
		ep = DefaultChatEndpoint
	}
	base, err := NewHF(HFConfig{Model: cfg.Model, Endpoint: ep, Token: cfg.Token, Concurrency: cfg.Concurrency,
		Timeout: cfg.Timeout, ConnectTimeout: cfg.ConnectTimeout, UserAgent: cfg.UserAgent, Client: cfg.Client,
		API: APIHF, BillTo: cfg.BillTo, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	start, auto, err := ParseConstrain(cfg.Constrain)
	if err != nil {
		return nil, fmt.Errorf("--constrain: %w", err)
	}
	c := &Chat{cfg: cfg, base: base, labels: append([]string(nil), cfg.Labels...), auto: auto}
	for _, l := range c.labels {
		c.norm = append(c.norm, normalise(l))
		q, _ := json.Marshal(l)
		c.quoted = append(c.quoted, string(q[1:len(q)-1]))
		c.longestRunes = max(c.longestRunes, len([]rune(l)))
		c.longestBytes = max(c.longestBytes, len(l))
	}
	c.constraint.Store(int32(start))
	c.fields = newConstraintFields(c.labels)
	c.reasoning.Store(cfg.ReasoningEffort != "" || IsReasoningModel(cfg.Model))
	c.openAI = isOpenAI(ep)
	if cfg.MultiLabel {
		// Before the completion cap: multi() changes the label lengths
		// it is sized by.
		c.multi()
	}
	c.topLogprobs = min(max(len(c.labels), 5), MaxTopLogprobs)
	c.labelsText = strings.Join(c.labels, ", ")
	if cfg.Prompt != "" && cfg.System != "" {
		return nil, errors.New("a prompt template and a label file's prompt contradict each other; give one")
	}
	c.maxTokens = c.completionCap(start, c.reasoning.Load())
	if cfg.Prompt == "" {
		c.fixedLen, c.textCount = len(c.system()), 1
	} else {
		// {labels} and {text} never overlap, so each is counted alone as
		// the replacer (body) finds them.
		c.textCount = strings.Count(cfg.Prompt, "{text}")
		nl := strings.Count(cfg.Prompt, "{labels}")
		c.fixedLen = len(cfg.Prompt) - c.textCount*len("{text}") + nl*(len(c.labelsText)-len("{labels}"))
	}
	return c, nil
}

// MaxPromptBytes bounds the messages one call sends: the template with the
// labels and the text in place, or the instruction and the text. It holds
// the longest text --max-chars allows (1,000,000 characters of up to 4
// bytes) once in a --prompt-file of 64 KiB; what it refuses is a template
// that repeats {text} (10,000 times made requests of 35 MB).
const MaxPromptBytes = 4 << 20

// promptBytes is the size of the messages a call for text sends, counted
// without building them.
func (c *Chat) promptBytes(text string) int { return c.fixedLen + c.textCount*len(text) }

// CheckText says, before any call, whether the prompt for text can be
// sent: an *Error (invalid_input) when it would be over MaxPromptBytes,
// for the row alone; nil otherwise.
func (c *Chat) CheckText(text string) error {
	n := c.promptBytes(text)
	if n <= MaxPromptBytes {
		return nil
	}
	why := fmt.Sprintf("the text is %s", mib(len(text)))
	if c.cfg.Prompt != "" {
		why = fmt.Sprintf("--prompt-file holds {text} %d times and the text is %s", c.textCount, mib(len(text)))
	}
	return &Error{Outcome: outcome.InvalidInput, Msg: fmt.Sprintf("the prompt would be %s, over the %s a prompt may hold: %s; put {text} in the template fewer times, or lower --max-chars",
		mib(n), mib(MaxPromptBytes), why)}
}

// mib is n bytes in KiB or MiB, for a message.
func mib(n int) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// CheckLabels refuses a set of labels a chat model could not be held to:
// fewer than MinLabels or more than MaxLabels, a blank one, or two that
// are the same once normalised as answers are (case, spaces, quotes). A
// label must show as it is (visible.Hidden, the rule for batch and budget
// names): one holding a zero-width or bidirectional control character
// would be written to the results looking like another label, or like
// none.
func CheckLabels(labels []string) error {
	if len(labels) < MinLabels || len(labels) > MaxLabels {
		return fmt.Errorf("want %d to %d labels, got %d", MinLabels, MaxLabels, len(labels))
	}
	seen := map[string]string{}
	for _, l := range labels {
		n := normalise(l)
		switch r, at := visible.Hidden(l); {
		case !utf8.ValidString(l):
			return fmt.Errorf("label %q is not UTF-8", l)
		case n == "":
			return errors.New("a label is empty")
		case len([]rune(l)) > MaxLabelLen:
			return fmt.Errorf("a label is longer than %d characters", MaxLabelLen)
		case at >= 0:
			return fmt.Errorf("label %q holds %U at character %d: a label may hold letters, digits, punctuation, symbols and spaces", l, r, at+1)
		}
		if prev, ok := seen[n]; ok {
			return fmt.Errorf("labels %q and %q are the same label", prev, l)
		}
		seen[n] = l
	}
	return nil
}

// Model implements Classifier.
func (c *Chat) Model() string { return c.cfg.Model }

// URL is the address posted to, credentials redacted.
func (c *Chat) URL() string { return c.base.URL() }

// Labels are the labels it answers with.
func (c *Chat) Labels() []string { return append([]string(nil), c.labels...) }

// EstimateTokens is a generous guess, before the call, of the tokens a call
// for texts costs (prompt and completion): about a token per three bytes of
// what is sent, a few for the chat template, and the completion's cap. A
// token limit reserves it, then corrects it with the usage reported.
func (c *Chat) EstimateTokens(texts []string) int {
	n := 0
	for _, t := range texts {
		// Every {text} and {labels} of the template is sent.
		n += c.promptBytes(t)/3 + 16 + c.maxTokens
	}
	return n
}

// defaultInstruction is the system message without --prompt-file.
const defaultInstruction = "You are a text classifier. Read the user's text and answer with exactly one of these labels, written as given, and nothing else: {labels}"

// defaultMultiInstruction is the system message under --multi-label
// without --prompt-file or a label file.
const defaultMultiInstruction = "You are a text classifier. Read the user's text and answer with every one of these labels that applies to it, written as given and separated by commas, and nothing else: {labels}"

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	// Temperature is 0, sent (the default is 1), but to a reasoning model,
	// which takes none; MaxTokens is the cap but for OpenAI's API and
	// reasoning models, which take MaxCompletionTokens (setParams).
	Temperature *float64 `json:"temperature,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Logprobs    bool     `json:"logprobs,omitempty"`
	TopLogprobs int      `json:"top_logprobs,omitempty"`
	Stream      bool     `json:"stream"`
	// The constraint's field, when there is one (constraintFields).
	ResponseFormat    json.RawMessage `json:"response_format,omitempty"`
	StructuredOutputs json.RawMessage `json:"structured_outputs,omitempty"`
	// OpenAI's fields, after the others: a body without them is the same
	// bytes as before they were known.
	MaxCompletionTokens int    `json:"max_completion_tokens,omitempty"`
	ReasoningEffort     string `json:"reasoning_effort,omitempty"`
	ServiceTier         string `json:"service_tier,omitempty"`
}

// sendOpts is what a call is sent with: logprobs or not, the constraint,
// and, for a row's second call, what its first answered (naming no label).
type sendOpts struct {
	logprobs   bool
	constraint Constraint
	unlabelled *string
}

// opts is what a call for call is sent with now.
func (c *Chat) opts(call Call) sendOpts {
	return sendOpts{logprobs: !c.noLogprobs.Load(), constraint: c.Constraint(), unlabelled: call.Unlabelled}
}

// messages are the prompt for text: the instruction and the text.
func (c *Chat) messages(text string) []chatMessage {
	if c.cfg.Prompt != "" {
		// One pass: a text holding "{labels}" is not expanded.
		r := strings.NewReplacer("{labels}", c.labelsText, "{text}", text)
		return []chatMessage{{Role: "user", Content: r.Replace(c.cfg.Prompt)}}
	}
	return []chatMessage{
		{Role: "system", Content: c.system()},
		{Role: "user", Content: text},
	}
}

// multi makes the client ask for several labels: the constraints' fields
// an array of them (JSON schema) or a list (regex; vLLM's structured
// outputs take one too), and the completion's room every label's.
func (c *Chat) multi() {
	c.fields.jsonSchema = multiSchema(c.labels, c.cfg.AllowNone)
	alts := make([]string, len(c.labels))
	runes, bytes := 0, 0
	for i, l := range c.labels {
		alts[i] = regexp.QuoteMeta(l)
		runes += len([]rune(l)) + 2
		bytes += len(l) + 4 // quotes and a comma
	}
	one := "(" + strings.Join(alts, "|") + ")"
	list := one + "(, " + one + ")*"
	c.fields.regex, _ = json.Marshal(map[string]string{"type": "regex", "value": list})
	c.fields.choice, _ = json.Marshal(map[string]string{"regex": list})
	c.longestRunes, c.longestBytes = runes, bytes
}

// system is the system message: the label file's fixed part, else the
// default instruction with the labels. Either is the same for every row
// and comes first, the row's text last: a prompt cache keys on a prompt's
// first tokens.
func (c *Chat) system() string {
	if c.cfg.System != "" {
		return c.cfg.System
	}
	if c.cfg.MultiLabel {
		return strings.ReplaceAll(defaultMultiInstruction, "{labels}", c.labelsText)
	}
	return strings.ReplaceAll(defaultInstruction, "{labels}", c.labelsText)
}

// correction is the turn a row's second call adds after its first answer,
// which named no label: the same instruction again, said of that answer.
const correction = "That answer names none of the labels. Answer again with exactly one of these labels, written as given, and nothing else: "

// multiCorrection is correction under --multi-label.
const multiCorrection = "That answer is not a list of the labels. Answer again with every one of these labels that applies, written as given and separated by commas, and nothing else: "

func (c *Chat) request(text string, o sendOpts) chatRequest {
	req := chatRequest{Model: c.cfg.Model, Messages: c.messages(text)}
	c.setParams(&req, o.constraint)
	if o.unlabelled != nil {
		again := correction
		if c.cfg.MultiLabel {
			again = multiCorrection
		}
		req.Messages = append(req.Messages,
			chatMessage{Role: "assistant", Content: *o.unlabelled},
			chatMessage{Role: "user", Content: again + c.labelsText})
	}
	if o.logprobs {
		req.Logprobs, req.TopLogprobs = true, c.topLogprobs
	}
	c.fields.apply(&req, o.constraint)
	return req
}

// Classify sends one call per text (one, but for a fallback behind a
// batching primary) and never retries, but for one thing: a server that
// refuses logprobs (400) is asked again without them, and never with them
// again in this run.
func (c *Chat) Classify(ctx context.Context, call Call) (Answer, error) {
	if len(call.Texts) == 0 {
		return Answer{}, &Error{Outcome: outcome.InvalidInput, Msg: "no text"}
	}
	ans := Answer{Model: c.cfg.Model, Predictions: make([]Prediction, 0, len(call.Texts))}
	for _, t := range call.Texts {
		p, lim, err := c.one(ctx, call, t)
		if lim.Known() {
			ans.Limits = lim
		}
		if err != nil {
			return Answer{}, err
		}
		ans.Predictions = append(ans.Predictions, p)
	}
	return ans, nil
}

// one sends text's call. A server that refuses logprobs, or (with
// --constrain auto) the constraint's field, is asked again at once without
// them, and never with them again in this run: each refusal turns one
// thing off for good, so this ends.
func (c *Chat) one(ctx context.Context, call Call, text string) (Prediction, Limits, error) {
	for {
		o := c.opts(call)
		p, lim, err := c.send(ctx, text, call, o)
		pe, ok := AsError(err)
		switch {
		case ok && o.logprobs && refusesLogprobs(pe):
			c.noLogprobs.Store(true)
			c.warnOnce.Do(func() {
				c.logWarn(fmt.Sprintf("%s refused logprobs (HTTP %d); asking without them for the rest of the run: the score column is blank", c.base.host, pe.Status))
			})
		case ok && !c.reasoning.Load() && refusesNonReasoning(pe):
			c.learnReasoning(pe)
		case ok && refusesConstraint(pe, o.constraint) && c.auto:
			c.stepDown(o.constraint, pe)
		case ok && refusesConstraint(pe, o.constraint):
			pe.Msg = refusedMsg(o.constraint)
			return p, lim, pe
		default:
			return p, lim, err
		}
	}
}

// Request implements Requester: the body a live call for text would send
// now (with logprobs unless the server refused them this run, under the
// constraint the run is at).
func (c *Chat) Request(text string) (string, []byte, error) {
	if err := c.CheckText(text); err != nil {
		return c.URL(), nil, err
	}
	b, err := json.Marshal(c.request(text, c.opts(Call{})))
	return c.URL(), b, err
}

func (c *Chat) send(ctx context.Context, text string, call Call, o sendOpts) (Prediction, Limits, error) {
	if err := c.CheckText(text); err != nil {
		return Prediction{}, Limits{}, err // never built: it could be gigabytes
	}
	creq := c.request(text, o)
	body, err := json.Marshal(creq)
	if err != nil {
		return Prediction{}, Limits{}, &Error{Outcome: outcome.InvalidInput, Msg: "text cannot be encoded", Err: err}
	}
	if err := ctx.Err(); err != nil {
		return Prediction{}, Limits{}, err
	}
	timeout := call.attemptTimeout(c.base.cfg.Timeout)
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, c.base.url, bytes.NewReader(body))
	if err != nil {
		return Prediction{}, Limits{}, &Error{Outcome: outcome.UpstreamFailed, Msg: "bad request URL", Err: err}
	}
	req.Header = c.base.headers
	resp, buf, release, err := c.base.exchange(req)
	if err != nil {
		return Prediction{}, Limits{}, c.base.transportError(ctx, actx, err, timeout)
	}
	defer release()
	now := time.Now()
	lim := ParseLimits(resp.Header, now)
	if resp.StatusCode != http.StatusOK {
		e := c.statusError(resp, buf.Bytes(), now)
		e.Limits = lim
		return Prediction{}, lim, e
	}
	if buf.Len() > maxBody {
		return Prediction{}, lim, &Error{Outcome: outcome.UpstreamPayload, Status: 200, Msg: "answer larger than 4 MiB", Limits: lim}
	}
	c.base.served.Store(true)
	if c.cfg.ReadContext && c.base.holds {
		c.readContext(ctx)
	}
	p, err := c.parse(buf.Bytes(), creq.Messages, o)
	if pe, ok := AsError(err); ok {
		pe.Limits = lim
	}
	return p, lim, err
}

// parse reads a chat completion: the label its answer names, its score,
// and the usage; an answer to a prompt the server cut to fit its context
// is not one.
func (c *Chat) parse(body []byte, msgs []chatMessage, o sendOpts) (Prediction, error) {
	a, why, ok := readChatAnswer(body)
	if !ok {
		return Prediction{}, &Error{Outcome: outcome.UpstreamPayload, Status: 200, Msg: "not a chat completion: " + why}
	}
	if e := c.stopped(a); e != nil {
		return Prediction{}, e
	}
	if e := c.truncated(a.usage, msgs); e != nil {
		return Prediction{}, e
	}
	if c.cfg.MultiLabel {
		return c.parseMulti(a, o)
	}
	i, several, form := c.label(a.content)
	if i < 0 && a.finish == "length" {
		return Prediction{}, c.cutAtCap(a)
	}
	ignored := o.constraint == ConstrainJSONSchema && form == formText ||
		o.constraint != ConstrainOff && o.constraint != ConstrainJSONSchema && i < 0
	if ignored {
		c.ignoredOnce.Do(func() {
			c.logWarn(fmt.Sprintf("%s answered without the constraint asked for (--constrain %s, %s): it seems to ignore it; answers are read as plain text",
				c.base.host, o.constraint, o.constraint.Field()))
		})
	}
	if i < 0 {
		what := "names no label"
		if several {
			what = "names several labels"
		}
		// Under a constraint that held, a second call would be answered
		// the same; one the server ignored is asked again as without one.
		return Prediction{}, &Error{Outcome: outcome.UpstreamUnlabelled, Status: 200, Usage: a.usage,
			Answer: clip(a.content, maxAnswer), NoRetry: o.constraint != ConstrainOff && !ignored,
			Msg: fmt.Sprintf("the answer %s of --labels: %q", what, summarise(a.content, c.cfg.Token))}
	}
	var d []float64
	if o.constraint == ConstrainOff || ignored {
		d = c.dist(a)
	} else {
		d = c.constrainedDist(a, o.constraint)
	}
	score := math.NaN()
	if d != nil && d[i] > 0 {
		score = d[i]
	}
	return Prediction{Label: c.labels[i], Score: score, Usage: a.usage, Scores: c.scoresOf(d)}, nil
}

// match is the label an answer names: the one equal to it once both are
// normalised (-1 if none); several is set when the answer holds more than
// one label as words (said so in the error).
func (c *Chat) match(answer string) (int, bool) {
	a := normalise(stripThink(answer))
	a = stripLead(a)
	for i, n := range c.norm {
		if a == n {
			return i, false
		}
	}
	found := 0
	padded := " " + wordsOnly(a) + " "
	for _, n := range c.norm {
		if strings.Contains(padded, " "+wordsOnly(n)+" ") {
			found++
		}
	}
	return -1, found > 1
}

// normalise is an answer (or a label) as they are compared: lower case,
// one space between words, without the quotes, brackets, asterisks and
// trailing punctuation a model wraps a word in.
func normalise(s string) string {
	s = strings.ToLower(strings.Join(strings.Fields(s), " "))
	const wrap = "\"'`*_“”‘’«»[](){}<> "
	for {
		t := strings.Trim(s, wrap)
		t = strings.TrimRight(t, ".,;:!?。")
		if t == s {
			return s
		}
		s = t
	}
}

// stripLead takes a leading "Label:" (or "Answer:", "Category:") off a
// normalised answer.
func stripLead(a string) string {
	for _, p := range []string{"label:", "answer:", "category:", "classification:"} {
		if strings.HasPrefix(a, p) {
			return normalise(a[len(p):])
		}
	}
	return a
}

var thinkBlock = regexp.MustCompile(`(?s)<think>.*?</think>`)

// stripThink drops a reasoning model's <think> block.
func stripThink(s string) string { return thinkBlock.ReplaceAllString(s, "") }

// wordsOnly turns punctuation into spaces, for finding labels as words.
func wordsOnly(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }), " ")
}

// openAIError is an OpenAI-shaped error: {"error": {"message", "type",
// "code"}}, or, from older vLLM, the same fields at the top with "object":
// "error" (its code a number).
type openAIError struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

func (e openAIError) code() string {
	var s string
	if json.Unmarshal(e.Code, &s) == nil {
		return s
	}
	return strings.Trim(string(e.Code), `"`)
}

func parseOpenAIError(body []byte) openAIError {
	var doc struct {
		Error json.RawMessage `json:"error"`
		openAIError
	}
	if json.Unmarshal(body, &doc) != nil {
		return openAIError{}
	}
	var inner openAIError
	if len(doc.Error) > 0 && doc.Error[0] == '{' && json.Unmarshal(doc.Error, &inner) == nil {
		return inner
	}
	var s string
	if json.Unmarshal(doc.Error, &s) == nil {
		// TGI: {"error": "...", "error_type": "..."}
		return openAIError{Message: s}
	}
	return doc.openAIError
}

var tryAgainIn = regexp.MustCompile(`(?i)try again in ([0-9]+(?:\.[0-9]+)?(?:ms|s|m))\b`)

// statusError is the status table's error (HF's), made precise by what an
// OpenAI-style body says: a 503 that says the server is busy is a rate
// limit, a 429 for a spent quota stops the run as a 402 does, a 429 for a
// rate says when to come back (retry-after-ms, Retry-After, "try again in
// 6ms", the reset headers), a 4xx for a text over the context is that
// row's own.
func (c *Chat) statusError(resp *http.Response, body []byte, now time.Time) *Error {
	e := c.base.statusError(resp, body, now)
	oe := parseOpenAIError(body)
	code, typ, msg := strings.ToLower(oe.code()), strings.ToLower(oe.Type), strings.ToLower(oe.Message)
	if d := retryAfterMs(resp.Header); d > 0 {
		e.RetryAfter = d
	}
	switch {
	case resp.StatusCode == 503 && busy(code, typ, msg+" "+strings.ToLower(e.Reason)):
		// Backpressure, not an outage: retried as a 429 is (backoff, the
		// shared pause, the adaptive limit), never counted by the breaker.
		e.Outcome, e.Msg, e.Cold = outcome.UpstreamRateLimited, "server busy: it holds as many calls as it takes (overloaded)", false
	case resp.StatusCode == 429 && (code == "insufficient_quota" || typ == "insufficient_quota"):
		e.Outcome, e.Msg, e.RetryAfter = outcome.UpstreamQuota, "quota exceeded: the account has no credit left for this API", 0
	case resp.StatusCode == 429:
		if e.RetryAfter == 0 {
			if m := tryAgainIn.FindStringSubmatch(oe.Message); m != nil {
				e.RetryAfter = ParseResetDuration(m[1])
			}
		}
		if e.RetryAfter == 0 {
			e.RetryAfter = resetOf(ParseLimits(resp.Header, now), typ)
		}
	case resp.StatusCode >= 400 && resp.StatusCode < 500 && overContext(code, typ, msg+" "+strings.ToLower(e.Reason)):
		e.Outcome, e.Msg = outcome.UpstreamRequestRejected, "context length exceeded: the text is longer than the model takes"
	}
	return e
}

// busyWords are what a 503 says when the server is full rather than down:
// Ollama's "server busy, please try again.  maximum pending requests
// exceeded" (OLLAMA_MAX_QUEUE reached), "overloaded" (TGI says it with a
// 429; proxies and hosted servers with a 503, or a code server_overloaded),
// a server "at capacity".
var busyWords = []string{"server busy", "maximum pending requests", "overloaded", "at capacity", "too many requests"}

// busy reports whether a 503's code, type or message (lower case) says the
// server is busy.
func busy(code, typ, msg string) bool {
	if strings.Contains(code, "overloaded") || strings.Contains(typ, "overloaded") {
		return true
	}
	for _, w := range busyWords {
		if strings.Contains(msg, w) {
			return true
		}
	}
	return false
}

// tgiTooLong is TGI's validation error for a prompt over its limits.
var tgiTooLong = regexp.MustCompile("`?inputs`? (tokens \\+ `?max_new_tokens`? must be <=|must have less than)")

// overContext reports whether a 4xx says the prompt is over the model's
// context: OpenAI's and vLLM's code or message, llama.cpp server's
// exceed_context_size_error ("exceeds the available context size"), TGI's
// "`inputs` tokens + `max_new_tokens` must be <= N".
func overContext(code, typ, msg string) bool {
	return code == "context_length_exceeded" || typ == "exceed_context_size_error" ||
		strings.Contains(msg, "context length") || strings.Contains(msg, "context window") ||
		strings.Contains(msg, "context size") || tgiTooLong.MatchString(msg)
}

// resetOf is when a 429 without Retry-After may be tried again: the reset
// of the limit the error's type names (OpenAI says "tokens" or
// "requests"), else of the limit that is spent (both: the later), else the
// later reset (the sooner may be a limit with room left).
func resetOf(l Limits, typ string) time.Duration {
	switch {
	case typ == "tokens" && l.Tokens && l.ResetTokens > 0:
		return l.ResetTokens
	case typ == "requests" && l.Requests && l.ResetRequests > 0:
		return l.ResetRequests
	}
	var spent, any time.Duration
	for _, d := range []struct {
		ok    bool
		left  int64
		reset time.Duration
	}{{l.Tokens, l.RemainingTokens, l.ResetTokens}, {l.Requests, l.RemainingRequests, l.ResetRequests}} {
		if !d.ok || d.reset <= 0 {
			continue
		}
		if d.left <= 0 {
			spent = max(spent, d.reset)
		}
		any = max(any, d.reset)
	}
	if spent > 0 {
		return spent
	}
	return any
}

// refusesLogprobs reports whether a 4xx says the server takes no logprobs
// (or not so many top_logprobs).
func refusesLogprobs(e *Error) bool {
	if e.Status < 400 || e.Status >= 500 || e.Status == 401 || e.Status == 403 || e.Status == 404 || e.Status == 429 {
		return false
	}
	return strings.Contains(strings.ToLower(e.Reason), "logprob")
}
