package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// sentBody is what hfsent's request held of the structured outputs.
type sentBody struct {
	MaxTokens      int `json:"max_tokens"`
	ResponseFormat *struct {
		Type       string `json:"type"`
		Value      string `json:"value"`
		JSONSchema *struct {
			Name   string `json:"name"`
			Strict bool   `json:"strict"`
			Schema struct {
				Type       string `json:"type"`
				Properties map[string]struct {
					Type string   `json:"type"`
					Enum []string `json:"enum"`
				} `json:"properties"`
				Required             []string `json:"required"`
				AdditionalProperties *bool    `json:"additionalProperties"`
			} `json:"schema"`
		} `json:"json_schema"`
	} `json:"response_format"`
	StructuredOutputs *struct {
		Choice []string `json:"choice"`
	} `json:"structured_outputs"`
	Messages []struct {
		Role, Content string
	} `json:"messages"`
}

func decodeSent(t *testing.T, b []byte) sentBody {
	t.Helper()
	var s sentBody
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("request %s: %v", b, err)
	}
	return s
}

// kindOf names the constraint a request was sent with.
func kindOf(s sentBody) string {
	switch {
	case s.StructuredOutputs != nil:
		return "choice"
	case s.ResponseFormat != nil && s.ResponseFormat.Type == "regex":
		return "regex"
	case s.ResponseFormat != nil && s.ResponseFormat.JSONSchema != nil:
		return "json-schema"
	case s.ResponseFormat != nil:
		return "other:" + s.ResponseFormat.Type
	}
	return "off"
}

// withLog logs the client's warnings into l (read once its calls are done:
// the handler writes under its own lock).
func withLog(l *bytes.Buffer) func(*provider.ChatConfig) {
	return func(cfg *provider.ChatConfig) { cfg.Logger = slog.New(slog.NewTextHandler(l, nil)) }
}

func constrain(k string) func(*provider.ChatConfig) {
	return func(cfg *provider.ChatConfig) { cfg.Constrain = k }
}

var sentiment = []string{"positive", "negative", "neutral"}

// By default a chat call asks OpenAI's nested json_schema: strict, an
// object with one required label enum and nothing else, with room for the
// whitespace a grammar allows; the answer {"label": ...} is read, and its
// score is the label token's share over the labels at that position.
func TestChatConstrainsByDefaultWithOpenAIsNestedSchema(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL+"/v1/chat/completions", sentiment)
	ans, err := classifyChat(t, c, "The staff were terrible.")
	if err != nil {
		t.Fatal(err)
	}
	p := ans.Predictions[0]
	if p.Label != "negative" || math.Abs(p.Score-0.9/0.98) > 1e-9 {
		t.Fatalf("prediction %+v, want negative at %v", p, 0.9/0.98)
	}
	s := decodeSent(t, f.Bodies()[0])
	rf := s.ResponseFormat
	if rf == nil || rf.Type != "json_schema" || rf.JSONSchema == nil || !rf.JSONSchema.Strict || rf.JSONSchema.Name == "" {
		t.Fatalf("response_format %+v: want OpenAI's nested, strict json_schema", rf)
	}
	sch := rf.JSONSchema.Schema
	if sch.Type != "object" || len(sch.Properties) != 1 || strings.Join(sch.Properties["label"].Enum, ",") != "positive,negative,neutral" ||
		strings.Join(sch.Required, ",") != "label" || sch.AdditionalProperties == nil || *sch.AdditionalProperties {
		t.Fatalf("schema %+v", sch)
	}
	// {"label":"positive"} is 20 bytes; a grammar lets 21 blanks stand in
	// each of the four places between its tokens.
	if s.MaxTokens < 20+4*21 {
		t.Fatalf("max_tokens %d cuts answers a grammar allows", s.MaxTokens)
	}
	if k := c.Constraint(); k != provider.ConstrainJSONSchema {
		t.Fatalf("constraint %v", k)
	}
}

// Answers are read as {"label": ...} with any whitespace, or as a bare
// label (a server that ignored the constraint), and always checked
// against --labels.
func TestChatReadsTheLabelInJSONOrBare(t *testing.T) {
	cases := map[string]string{
		"{ \"label\"\n:\"negative\"}\n \t": "negative",
		`{"label": "Neutral"}`:             "neutral",
		"Positive.":                        "positive",
		`{"label": "angry"}`:               "",
		`{"label": 3}`:                     "",
		`{ "label" : `:                     "",
		`{"mood": "positive"}`:             "",
	}
	for answer, want := range cases {
		f := &fakehf.Chat{Answer: func(string) string { return answer }}
		srv := fakehf.StartChat(f)
		c := newChat(t, srv.URL, sentiment)
		ans, err := classifyChat(t, c, "text")
		srv.Close()
		if want == "" {
			if provider.OutcomeOf(err) != outcome.UpstreamUnlabelled {
				t.Errorf("%q: %+v %v, want upstream_unlabelled", answer, ans, err)
			}
			continue
		}
		if err != nil || ans.Predictions[0].Label != want {
			t.Errorf("%q: %+v %v, want %s", answer, ans, err, want)
		}
	}
}

// TGI refuses OpenAI's nested form with a 422 naming response_format:
// auto moves down to its regex grammar once for the run, says so once, and
// the row that met the refusal is answered; labels are escaped in the
// regex.
func TestChatAutoMovesToTGIsRegexOnItsRefusal(t *testing.T) {
	f := &fakehf.Chat{Backend: fakehf.BackendTGI}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	var log bytes.Buffer
	labels := []string{"a.b", "c|d", "positive"}
	c := newChat(t, srv.URL+"/v1/chat/completions", labels, withLog(&log))
	for range 3 {
		ans, err := classifyChat(t, c, "fine")
		if err != nil || ans.Predictions[0].Label != "positive" || math.Abs(ans.Predictions[0].Score-0.9/0.98) > 1e-9 {
			t.Fatalf("%+v %v", ans, err)
		}
	}
	var kinds []string
	for _, b := range f.Bodies() {
		kinds = append(kinds, kindOf(decodeSent(t, b)))
	}
	if strings.Join(kinds, ",") != "json-schema,regex,regex,regex" {
		t.Fatalf("constraints sent %v", kinds)
	}
	if v := decodeSent(t, f.Bodies()[1]).ResponseFormat.Value; v != `(a\.b|c\|d|positive)` {
		t.Fatalf("regex %q: labels not escaped", v)
	}
	if n := strings.Count(log.String(), "refused --constrain json-schema"); n != 1 || !strings.Contains(log.String(), "regex") {
		t.Fatalf("said %d times:\n%s", n, log.String())
	}
	if c.Constraint() != provider.ConstrainRegex {
		t.Fatalf("constraint %v", c.Constraint())
	}
}

// A server that refuses every constraint's field moves auto down to the
// end, off, one step a refusal; its answers are then read as plain text.
func TestChatAutoEndsAtOff(t *testing.T) {
	var mu sync.Mutex
	var kinds []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var s sentBody
		_ = json.Unmarshal(b, &s)
		mu.Lock()
		kinds = append(kinds, kindOf(s))
		mu.Unlock()
		switch {
		case s.ResponseFormat != nil:
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"message":"response_format is not supported by this model","type":"invalid_request_error"}}`)
		case s.StructuredOutputs != nil:
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"message":"Unrecognized request argument supplied: structured_outputs","type":"invalid_request_error"}}`)
		default:
			io.WriteString(w, `{"choices":[{"message":{"content":"Negative."}}]}`)
		}
	}))
	defer srv.Close()
	var log bytes.Buffer
	c := newChat(t, srv.URL, sentiment, withLog(&log))
	ans, err := classifyChat(t, c, "x")
	if err != nil || ans.Predictions[0].Label != "negative" {
		t.Fatalf("%+v %v", ans, err)
	}
	if strings.Join(kinds, ",") != "json-schema,regex,choice,off" || c.Constraint() != provider.ConstrainOff {
		t.Fatalf("constraints sent %v, now %v", kinds, c.Constraint())
	}
	if strings.Count(log.String(), "refused --constrain") != 3 || !strings.Contains(log.String(), "asking without a constraint") {
		t.Fatalf("log:\n%s", log.String())
	}
}

// vLLM's choice: structured_outputs {"choice": labels}, answered bare.
func TestChatConstrainChoiceIsVLLMsStructuredOutputs(t *testing.T) {
	f := &fakehf.Chat{Backend: fakehf.BackendVLLM}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL, sentiment, constrain("choice"))
	ans, err := classifyChat(t, c, "broke on day one")
	if err != nil || ans.Predictions[0].Label != "negative" || math.Abs(ans.Predictions[0].Score-0.9/0.98) > 1e-9 {
		t.Fatalf("%+v %v", ans, err)
	}
	s := decodeSent(t, f.Bodies()[0])
	if s.StructuredOutputs == nil || strings.Join(s.StructuredOutputs.Choice, ",") != "positive,negative,neutral" || s.ResponseFormat != nil {
		t.Fatalf("request %s", f.Bodies()[0])
	}
	// vLLM refuses TGI's regex type (its pydantic 400): a run told to use
	// it gets that row's refusal, saying what to do, after one call.
	c = newChat(t, srv.URL, sentiment, constrain("regex"))
	_, err = classifyChat(t, c, "x")
	pe, ok := provider.AsError(err)
	if !ok || pe.Outcome != outcome.UpstreamRequestRejected || !strings.Contains(pe.Msg, "refuses --constrain regex") ||
		!strings.Contains(pe.Msg, "--constrain auto") || f.Calls() != 2 {
		t.Fatalf("%v after %d calls", err, f.Calls())
	}
	// off sends no constraint at all.
	c = newChat(t, srv.URL, sentiment, constrain("off"))
	_, _ = classifyChat(t, c, "x")
	if b := f.Bodies(); kindOf(decodeSent(t, b[len(b)-1])) != "off" || bytes.Contains(b[len(b)-1], []byte("response_format")) {
		t.Fatalf("off sent %s", b[len(b)-1])
	}
	if _, err := provider.NewChat(provider.ChatConfig{Model: "m", Labels: sentiment, Constrain: "grammar"}); err == nil {
		t.Fatal("--constrain grammar taken")
	}
}

// A server that ignores the field answers plain text: it is read as a bare
// label, said once; an answer naming no label is then asked again (the
// constraint did not hold), while one under a constraint that held (JSON
// whose label is none of them) is not: the same call would get it again.
func TestChatServerIgnoringTheConstraint(t *testing.T) {
	f := &fakehf.Chat{Backend: fakehf.BackendIgnore}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	var log bytes.Buffer
	c := newChat(t, srv.URL, sentiment, withLog(&log))
	for range 2 {
		ans, err := classifyChat(t, c, "lovely")
		if err != nil || ans.Predictions[0].Label != "positive" {
			t.Fatalf("%+v %v", ans, err)
		}
	}
	if n := strings.Count(log.String(), "seems to ignore it"); n != 1 {
		t.Fatalf("said %d times:\n%s", n, log.String())
	}
	_, err := classifyChat(t, c, "#unlabelled#")
	if pe, _ := provider.AsError(err); pe == nil || pe.Outcome != outcome.UpstreamUnlabelled || !pe.Retryable() || pe.Answer != "I cannot tell." {
		t.Fatalf("ignored constraint, no label: %+v, want retryable once with the answer kept", pe)
	}
	held := &fakehf.Chat{Answer: func(string) string { return `{"label": "angry"}` }}
	srv2 := fakehf.StartChat(held)
	defer srv2.Close()
	_, err = classifyChat(t, newChat(t, srv2.URL, sentiment), "x")
	if pe, _ := provider.AsError(err); pe == nil || pe.Outcome != outcome.UpstreamUnlabelled || pe.Retryable() {
		t.Fatalf("constraint held, no label: %+v, want not retried", pe)
	}
}

// The corrective second call quotes the first answer back as the
// assistant's and asks again naming the labels: other bytes than the
// first call's, whose body Request still shows.
func TestChatSecondCallTellsTheModelItsAnswerNamedNoLabel(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL, sentiment, constrain("off"))
	prev := "I cannot tell."
	if _, err := c.Classify(context.Background(), provider.Call{Texts: []string{"fine"}, Unlabelled: &prev}); err != nil {
		t.Fatal(err)
	}
	_, first, _ := c.Request("fine")
	second := f.Bodies()[0]
	if bytes.Equal(first, second) {
		t.Fatal("the second call sent the first call's bytes")
	}
	s := decodeSent(t, second)
	n := len(s.Messages)
	if n != 4 || s.Messages[2].Role != "assistant" || s.Messages[2].Content != prev || s.Messages[3].Role != "user" ||
		!strings.Contains(s.Messages[3].Content, "positive, negative, neutral") {
		t.Fatalf("messages %+v", s.Messages)
	}
}

// The score under a constraint: the label's token past {"label":", its
// probability over the labels' first tokens there. Blank when a label
// has no alternative there, or when one alternative starts two labels.
func TestChatConstrainedScore(t *testing.T) {
	body := func(tokens string) func(fakehf.ChatRequest) string {
		return func(fakehf.ChatRequest) string {
			return `{"choices":[{"message":{"content":"{\"label\": \"negative\"}"},"logprobs":{"content":[` + tokens + `]}}]}`
		}
	}
	tok := func(t string, alts ...string) string {
		return `{"token":` + t + `,"logprob":-0.1,"top_logprobs":[` + strings.Join(alts, ",") + `]}`
	}
	alt := func(t string, lp float64) string {
		b, _ := json.Marshal(map[string]any{"token": t, "logprob": lp})
		return string(b)
	}
	head := tok(`"{"`) + "," + tok(`"\""`) + "," + tok(`"label"`) + "," + tok(`"\": \""`) + ","
	tail := "," + tok(`"\"}"`)
	// tiny-label's real distribution at the label (FINDINGS): 0.8437.
	tinyLabel := []string{alt("negative", -0.18031921982765198), alt("neutral", -2.1796793937683105), alt("positive", -3.1793594360351562), alt("", -10.18), alt("\x01", -10.18)}
	cases := []struct {
		name   string
		tokens string
		want   float64
	}{
		{"one token a label", head + tok(`"negative"`, tinyLabel...) + tail, 0.8437},
		{"quote merged into the label's token", tok(`"{\"label\": "`) + "," + tok(`"\"neg"`, alt(`"neg`, math.Log(0.6)), alt(`"pos`, math.Log(0.3)), alt(`"neu`, math.Log(0.1)), alt(`{`, -1)) + "," + tok(`"ative\"}"`), 0.6},
		{"a label missing", head + tok(`"negative"`, alt("negative", -0.1), alt("positive", -3)) + tail, math.NaN()},
		{"a token starting two labels", head + tok(`"ne"`, alt("ne", -0.1), alt("negative", -1), alt("neutral", -2), alt("positive", -3)) + "," + tok(`"gative"`) + tail, math.NaN()},
		{"tokens that are not the answer", tok(`"Sure"`, alt("Sure", -0.1)), math.NaN()},
	}
	for _, tc := range cases {
		f := &fakehf.Chat{Raw: body(tc.tokens)}
		srv := fakehf.StartChat(f)
		ans, err := classifyChat(t, newChat(t, srv.URL, sentiment), "x")
		srv.Close()
		if err != nil || ans.Predictions[0].Label != "negative" {
			t.Errorf("%s: %+v %v", tc.name, ans, err)
			continue
		}
		got := ans.Predictions[0].Score
		if math.IsNaN(tc.want) != math.IsNaN(got) || !math.IsNaN(got) && math.Abs(got-tc.want) > 5e-5 {
			t.Errorf("%s: score %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Hostile answers: what hfsent does not need (usage, logprobs) never
// throws a label away; counts saturate; a bad logprob blanks the score.
func TestChatHostileAnswers(t *testing.T) {
	const lp = `"logprobs":{"content":[{"token":"positive","logprob":%s,"top_logprobs":%s}]}`
	okTop := `[{"token":"positive","logprob":-0.1},{"token":"negative","logprob":-2.5}]`
	msg := `"message":{"content":"positive"}`
	cases := []struct {
		name              string
		body              string
		prompt, compl     int
		known, scoreBlank bool
	}{
		{"usage past int64", `{"choices":[{` + msg + `}],"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":99999999999999999999999}}`, provider.MaxTokens, provider.MaxTokens, true, true},
		{"usage as 10.0 and \"12\"", `{"choices":[{` + msg + `}],"usage":{"prompt_tokens":10.0,"completion_tokens":"12"}}`, 10, 12, true, true},
		{"usage not whole", `{"choices":[{` + msg + `}],"usage":{"prompt_tokens":10.5,"completion_tokens":"x"}}`, 0, 0, false, true},
		{"usage negative, or a list", `{"choices":[{` + msg + `}],"usage":{"prompt_tokens":-3,"completion_tokens":[1]}}`, 0, 0, false, true},
		{"usage a string", `{"choices":[{` + msg + `}],"usage":"lots"}`, 0, 0, false, true},
		{"content as parts", `{"choices":[{"message":{"content":[{"type":"text","text":"posi"},{"type":"text","text":"tive"}]}}]}`, 0, 0, false, true},
		{"logprob null", `{"choices":[{` + msg + `,` + fmt.Sprintf(lp, "null", okTop) + `}]}`, 0, 0, false, true},
		{"logprob NaN", `{"choices":[{` + msg + `,` + fmt.Sprintf(lp, "NaN", okTop) + `}]}`, 0, 0, false, true},
		{"logprob positive", `{"choices":[{` + msg + `,` + fmt.Sprintf(lp, "0.7", okTop) + `}]}`, 0, 0, false, true},
		{"an alternative's logprob -Infinity", `{"choices":[{` + msg + `,` + fmt.Sprintf(lp, "-0.1", `[{"token":"positive","logprob":-0.1},{"token":"negative","logprob":-Infinity}]`) + `}]}`, 0, 0, false, true},
		{"top_logprobs not a list", `{"choices":[{` + msg + `,` + fmt.Sprintf(lp, "-0.1", `{"positive":-0.1}`) + `}]}`, 0, 0, false, true},
		{"logprobs sane", `{"choices":[{` + msg + `,` + fmt.Sprintf(lp, "-0.1", okTop) + `}]}`, 0, 0, false, false},
	}
	for _, tc := range cases {
		f := &fakehf.Chat{Raw: func(fakehf.ChatRequest) string { return tc.body }}
		srv := fakehf.StartChat(f)
		ans, err := classifyChat(t, newChat(t, srv.URL, []string{"positive", "negative"}, constrain("off")), "x")
		srv.Close()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		p := ans.Predictions[0]
		if p.Label != "positive" || p.Usage.Known != tc.known || p.Usage.Prompt != tc.prompt || p.Usage.Completion != tc.compl ||
			math.IsNaN(p.Score) != tc.scoreBlank {
			t.Errorf("%s: %+v", tc.name, p)
		}
	}
	// Sums of such counts stop at MaxTokens, never wrap negative.
	u := provider.Usage{Prompt: provider.MaxTokens, Completion: 5, Known: true}
	if s := u.Add(u); s.Prompt != provider.MaxTokens || s.Completion != 10 || s.Total() != provider.MaxTokens {
		t.Fatalf("sum %+v total %d", s, s.Total())
	}
}

// A prompt the server cut to fit its context (Ollama does so silently,
// answering 200) is never success: it is upstream_truncated, not retried,
// not final, its error naming the context and the way out. The context is
// read from the server's own API after its first answer; without one, a
// count far under what the prompt can be tells it.
func TestChatTruncatedPromptIsNotSuccess(t *testing.T) {
	long := strings.Repeat("The parcel came late and the box was torn. ", 70)
	for _, api := range []string{fakehf.ContextOllamaPS, fakehf.ContextOllamaShow, fakehf.ContextVLLM, ""} {
		f := &fakehf.Chat{Context: 512, ContextAPI: api, ContextModel: "m", Truncate: true}
		if api == "" {
			f.Context = 128 // not said: the estimate must tell
		}
		srv := fakehf.StartChat(f)
		c := newChat(t, srv.URL+"/v1/chat/completions", sentiment, func(cfg *provider.ChatConfig) { cfg.Model, cfg.ReadContext = "m", true })
		ans, err := classifyChat(t, c, "Short and sweet!")
		if err != nil || ans.Predictions[0].Label != "positive" {
			t.Errorf("%s: a short text: %+v %v", api, ans, err)
		}
		_, err = classifyChat(t, c, long)
		srv.Close()
		pe, ok := provider.AsError(err)
		if !ok || pe.Outcome != outcome.UpstreamTruncated || pe.Retryable() || pe.Outcome.Final() || pe.StopsRun() || !pe.Usage.Known {
			t.Errorf("%s: a long text: %v", api, err)
			continue
		}
		if !strings.Contains(pe.Msg, "num_ctx") || !strings.Contains(pe.Msg, "--max-chars") ||
			api != "" && (!strings.Contains(pe.Msg, "512") || c.Context().Tokens != 512) {
			t.Errorf("%s: %q (context %+v)", api, pe.Msg, c.Context())
		}
	}
	// Without ReadContext (the router) nothing but the calls is asked.
	f := &fakehf.Chat{Context: 512, ContextAPI: fakehf.ContextOllamaPS}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL+"/v1/chat/completions", sentiment)
	if _, err := classifyChat(t, c, "fine"); err != nil || c.Context().Source != "" {
		t.Fatalf("%v, context %+v", err, c.Context())
	}
}

// A 503 that says the server is busy (Ollama's OLLAMA_MAX_QUEUE answer) is
// backpressure: a rate limit, retried as a 429 is, not a failure of the
// server; any other 503 is still one.
func TestChatBusyIsBackpressure(t *testing.T) {
	f := &fakehf.Chat{BusyFirst: 1}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	c := newChat(t, srv.URL+"/v1/chat/completions", sentiment)
	_, err := classifyChat(t, c, "x")
	pe, ok := provider.AsError(err)
	if !ok || pe.Outcome != outcome.UpstreamRateLimited || pe.Status != 503 || !pe.Retryable() || pe.Cold || !strings.Contains(pe.Msg, "busy") {
		t.Fatalf("%+v", err)
	}
	for body, want := range map[string]outcome.Code{
		`{"error":"Model is overloaded","error_type":"overloaded"}`:                                        outcome.UpstreamRateLimited,
		`{"error":{"message":"The engine is currently overloaded","type":"server_overloaded","code":503}}`: outcome.UpstreamRateLimited,
		`{"error":{"message":"Service Unavailable","type":"api_error"}}`:                                   outcome.UpstreamFailed,
		`<html>503 Service Temporarily Unavailable</html>`:                                                 outcome.UpstreamFailed,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(503)
			io.WriteString(w, body)
		}))
		_, err := classifyChat(t, newChat(t, srv.URL, sentiment), "x")
		srv.Close()
		if got := provider.OutcomeOf(err); got != want {
			t.Errorf("503 %s: %s, want %s", body, got, want)
		}
	}
}
