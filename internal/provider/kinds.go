package provider

import (
	"log/slog"
	"net/http"
	"time"
)

// Kind is a kind of provider, as --provider names it: how its client is made
// and what it needs. To add a provider, write its client (a Classifier) in a
// file of its own and add its row to kinds; the policies, the engine and
// every command then take it as they take the others.
type Kind struct {
	// Name is what --provider says.
	Name string
	// Remote: its calls go over the network to an endpoint, so they can fail
	// and recover: every policy applies (retries, the breaker, rate limits,
	// the fallback, the verdict on an endpoint that refuses every call), a
	// token may be needed, and check can ask it. A kind that is not remote
	// answers in the process: its guard only bounds and records its calls.
	Remote bool
	// Endpoint, when set, says what its endpoint must be: it has no default
	// one, and cannot be used without.
	Endpoint string
	// Model, when set, is the only model it answers with, whatever is asked.
	Model string
	// Chat: it asks a chat model (OpenAI's Chat Completions), which needs
	// --labels, answers one text per call, and reports tokens.
	Chat bool
	// open makes its client.
	open func(Spec) (Classifier, Info, error)
}

// Spec is what a client is made from. A kind reads what it needs of it.
type Spec struct {
	Model    string
	Endpoint string // full URL; "{model}" is replaced; "" is the kind's default
	Token    string // may be empty with a custom endpoint
	// Concurrency sizes the connection pool: one connection per call in flight.
	Concurrency    int
	Timeout        time.Duration // one attempt, end to end
	ConnectTimeout time.Duration
	UserAgent      string
	// BillTo, when set, names the organisation that pays for the calls.
	BillTo string
	// Labels are the answers allowed: required for chat; with hf they ask
	// a zero-shot model (parameters.candidate_labels).
	Labels []string
	// Prompt is chat's template ({labels}, {text}); "" the default.
	Prompt string
	// System is chat's fixed part (a label file rendered): sent as the
	// system message, before the row's text, in place of the default
	// instruction; "" the default. Not with Prompt.
	System string
	// Hypotheses, when set with hf's Labels (a label file's descriptions),
	// are sent as the candidates in their place, one per label in order,
	// with HypothesisTemplate; the answer's hypothesis is read back as its
	// label.
	Hypotheses         []string
	HypothesisTemplate string
	// TopK asks for the TopK best labels' scores (--top-k); MultiLabel for
	// several labels a text (--multi-label), those whose scores reach
	// Threshold (hf) or the model names (chat: at least one, unless
	// AllowNone).
	TopK       int
	MultiLabel bool
	Threshold  float64
	AllowNone  bool
	// Constrain is chat's --constrain ("" is auto).
	Constrain string
	// ReasoningEffort, MaxCompletionTokens and ServiceTier are chat's
	// --reasoning-effort, --max-completion-tokens and --service-tier.
	ReasoningEffort     string
	MaxCompletionTokens int
	ServiceTier         string
	// Client overrides the HTTP client (check's, which keeps the last
	// answer); nil builds one.
	Client *http.Client
	Logger *slog.Logger
}

// Info describes a client for messages: the URL it posts to, credentials
// redacted, and its request format (APIHF or APITEI); both "" for a client
// that is not remote.
type Info struct {
	URL, API string
}

// kinds are the providers, in the order help and messages list them.
var kinds = []Kind{
	{Name: "hf", Remote: true, open: openHF("")},
	{Name: APITEI, Remote: true, Endpoint: "the URL of the server's /predict, e.g. http://127.0.0.1:8080/predict", open: openHF(APITEI)},
	{Name: "chat", Remote: true, Chat: true, open: openChat},
	{Name: "local", Model: LocalModel, open: func(Spec) (Classifier, Info, error) { return NewLocal(), Info{}, nil }},
}

// Kinds lists the kinds of provider.
func Kinds() []Kind { return append([]Kind(nil), kinds...) }

// KindOf returns the kind named name.
func KindOf(name string) (Kind, bool) {
	for _, k := range kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// New makes the kind's client from s.
func (k Kind) New(s Spec) (Classifier, Info, error) { return k.open(s) }

// openHF makes the HTTP client of the Hugging Face API's request format, or
// of TEI's (api APITEI; "": chosen by the endpoint's URL).
func openHF(api string) func(Spec) (Classifier, Info, error) {
	return func(s Spec) (Classifier, Info, error) {
		hf, err := NewHF(HFConfig{
			Model:          s.Model,
			Endpoint:       s.Endpoint,
			Token:          s.Token,
			Concurrency:    s.Concurrency,
			Timeout:        s.Timeout,
			ConnectTimeout: s.ConnectTimeout,
			UserAgent:      s.UserAgent,
			Client:         s.Client,
			API:            api,
			BillTo:         s.BillTo,
			Logger:         s.Logger,
			Labels:         s.Labels,
			Hypotheses:     s.Hypotheses,
			Template:       s.HypothesisTemplate,
			TopK:           s.TopK,
			MultiLabel:     s.MultiLabel,
			Threshold:      s.Threshold,
		})
		if err != nil {
			return nil, Info{}, err
		}
		return hf, Info{URL: hf.URL(), API: hf.API()}, nil
	}
}

// openChat makes the OpenAI-compatible chat client.
func openChat(s Spec) (Classifier, Info, error) {
	c, err := NewChat(ChatConfig{
		Model:               s.Model,
		Endpoint:            s.Endpoint,
		Token:               s.Token,
		Labels:              s.Labels,
		Prompt:              s.Prompt,
		Constrain:           s.Constrain,
		ReadContext:         true, // asked of a server other than the router only
		ReasoningEffort:     s.ReasoningEffort,
		MaxCompletionTokens: s.MaxCompletionTokens,
		ServiceTier:         s.ServiceTier,
		Concurrency:         s.Concurrency,
		Timeout:             s.Timeout,
		ConnectTimeout:      s.ConnectTimeout,
		UserAgent:           s.UserAgent,
		Client:              s.Client,
		BillTo:              s.BillTo,
		Logger:              s.Logger,
		System:              s.System,
		MultiLabel:          s.MultiLabel,
		AllowNone:           s.AllowNone,
	})
	if err != nil {
		return nil, Info{}, err
	}
	return c, Info{URL: c.URL(), API: APIChat}, nil
}
