package fakehf

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// Backends the fake chat server answers structured outputs as (Chat.Backend),
// each as its server's source and a real exchange show it:
const (
	// BackendOpenAI (the default) takes OpenAI's nested response_format
	// {"type": "json_schema", "json_schema": {..., "schema"}} and answers
	// {"label": ...}; it refuses any other response_format type, and a
	// structured_outputs field, with a 400 naming the field (as OpenAI
	// does), and ignores the flat form {"type": "json_schema", "schema"}
	// (as Ollama and llama.cpp's server do).
	BackendOpenAI = ""
	// BackendVLLM takes the nested form and structured_outputs {"choice"}
	// (answered as the bare label), and refuses a response_format type it
	// does not know with its pydantic 400.
	BackendVLLM = "vllm"
	// BackendTGI refuses OpenAI's nested form with a 422 (its
	// response_format is {"type", "value"}, so "missing field `value`"),
	// takes {"type": "regex", "value": "(a|b)"} (answered as the bare
	// label), and ignores structured_outputs.
	BackendTGI = "tgi"
	// BackendIgnore ignores every constraint: it answers as it would
	// without (a server that fails open silently).
	BackendIgnore = "ignore"
)

// Context APIs the fake answers (Chat.ContextAPI), for a client that asks
// what context the server gives the model.
const (
	ContextOllamaPS   = "ollama-ps"   // /api/ps: context_length of the loaded model
	ContextOllamaShow = "ollama-show" // /api/show: parameters "num_ctx N"
	ContextVLLM       = "vllm"        // /v1/models: max_model_len
)

// ollamaBusy is Ollama's answer when OLLAMA_MAX_QUEUE calls already wait.
const ollamaBusy = `{"error":{"message":"server busy, please try again.  maximum pending requests exceeded","type":"api_error","param":null,"code":null}}`

// constraint is what a request asks the answer to be: kind "json",
// "choice" or "regex" (or "" for none), and the labels it allows.
type constraint struct {
	kind   string
	labels []string
}

// constrained reads the request's structured-output fields as the backend
// would: the constraint it holds the answer to, or the refusal it answers
// (status 0: none).
func (c *Chat) constrained(req ChatRequest) (k constraint, status int, body, ctype string) {
	var rf struct {
		Type       string          `json:"type"`
		Value      json.RawMessage `json:"value"`
		JSONSchema *struct {
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	hasRF := len(req.ResponseFormat) > 0 && string(req.ResponseFormat) != "null" && json.Unmarshal(req.ResponseFormat, &rf) == nil
	var so struct {
		Choice []string `json:"choice"`
	}
	hasSO := len(req.StructuredOutputs) > 0 && string(req.StructuredOutputs) != "null" && json.Unmarshal(req.StructuredOutputs, &so) == nil
	switch c.Backend {
	case BackendIgnore:
		return constraint{}, 0, "", ""
	case BackendTGI:
		switch {
		case hasRF && rf.Type == "regex":
			var v string
			_ = json.Unmarshal(rf.Value, &v)
			return constraint{kind: "regex", labels: regexLabels(v)}, 0, "", ""
		case hasRF && len(rf.Value) == 0:
			return k, 422, "Failed to deserialize the JSON body into the target type: response_format: missing field `value` at line 1 column 412", "text/plain; charset=utf-8"
		}
		return constraint{}, 0, "", ""
	}
	switch {
	case hasRF && rf.Type == "json_schema" && rf.JSONSchema != nil && arrayEnumOf(rf.JSONSchema.Schema) != nil:
		return constraint{kind: "json-array", labels: arrayEnumOf(rf.JSONSchema.Schema)}, 0, "", ""
	case hasRF && rf.Type == "json_schema" && rf.JSONSchema != nil:
		return constraint{kind: "json", labels: enumOf(rf.JSONSchema.Schema)}, 0, "", ""
	case hasRF && rf.Type == "json_schema":
		return constraint{}, 0, "", "" // the flat form: ignored
	case hasRF && rf.Type != "text" && rf.Type != "json_object":
		if c.Backend == BackendVLLM {
			return k, 400, `{"error":{"message":"[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text', 'json_object', 'json_schema' or 'structural_tag'\"}]","type":"BadRequestError","param":null,"code":400}}`, "application/json"
		}
		return k, 400, `{"error":{"message":"Invalid value: '` + rf.Type + `'. Supported values are: 'json_object', 'json_schema', and 'text'.","type":"invalid_request_error","param":"response_format.type","code":"invalid_value"}}`, "application/json"
	case hasSO && c.Backend == BackendVLLM:
		return constraint{kind: "choice", labels: so.Choice}, 0, "", ""
	case hasSO:
		return k, 400, `{"error":{"message":"Unrecognized request argument supplied: structured_outputs","type":"invalid_request_error","param":null,"code":null}}`, "application/json"
	}
	return constraint{}, 0, "", ""
}

// enumOf is the label enum of the schema hfsent sends.
func enumOf(schema json.RawMessage) []string {
	var s struct {
		Properties struct {
			Label struct {
				Enum []string `json:"enum"`
			} `json:"label"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	return s.Properties.Label.Enum
}

// arrayEnumOf is the label enum of the schema hfsent sends under
// --multi-label ({"labels": [enum, ...]}), nil for another.
func arrayEnumOf(schema json.RawMessage) []string {
	var s struct {
		Properties struct {
			Labels struct {
				Items struct {
					Enum []string `json:"enum"`
				} `json:"items"`
			} `json:"labels"`
		} `json:"properties"`
	}
	_ = json.Unmarshal(schema, &s)
	return s.Properties.Labels.Items.Enum
}

// regexLabels reads "(a|b\.c)" back into its alternatives.
func regexLabels(v string) []string {
	v = strings.TrimSuffix(strings.TrimPrefix(v, "("), ")")
	var out []string
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch {
		case v[i] == '\\' && i+1 < len(v):
			i++
			b.WriteByte(v[i])
		case v[i] == '|':
			out = append(out, b.String())
			b.Reset()
		default:
			b.WriteByte(v[i])
		}
	}
	return append(out, b.String())
}

// pick is the allowed label the fake's model chooses for text: the one
// that is Label(text) whatever its case, else the first.
func (k constraint) pick(text string) int {
	want, _ := Label(text)
	for i, l := range k.labels {
		if strings.EqualFold(l, want) {
			return i
		}
	}
	return 0
}

// constrainedChoice is choices[0] of an answer held to k: {"label": ...}
// or the bare label, with logprobs as a server reports them under a
// grammar (the model's own distribution): at the label's first token the
// chosen label's first three bytes at 90%, each other label's at a share
// of 8%, and a word no grammar allows at 2%.
func (c *Chat) constrainedChoice(k constraint, req ChatRequest, text string) (content string, ch map[string]any) {
	i := k.pick(text)
	if len(k.labels) == 0 {
		return "", map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": ""}}
	}
	label := k.labels[i]
	if k.kind == "json-array" {
		// An array of one label, Label(text)'s; no logprobs (hfsent reads
		// no score from an array).
		content = `{"labels":["` + label + `"]}`
		return content, map[string]any{"index": 0, "finish_reason": "stop", "logprobs": nil,
			"message": map[string]any{"role": "assistant", "content": content}}
	}
	head, tail := split3(label)
	var toks []string
	if k.kind == "json" {
		content = `{"label":"` + label + `"}`
		toks = []string{`{"`, `label`, `":"`, head}
		if tail != "" {
			toks = append(toks, tail)
		}
		toks = append(toks, `"}`)
	} else {
		content = label
		toks = []string{head}
		if tail != "" {
			toks = append(toks, tail)
		}
	}
	ch = map[string]any{"index": 0, "finish_reason": "stop", "message": map[string]any{"role": "assistant", "content": content}}
	if !req.Logprobs || strings.Contains(text, "#nologprobs#") {
		ch["logprobs"] = nil
		return content, ch
	}
	type alt struct {
		Token   string  `json:"token"`
		Logprob float64 `json:"logprob"`
	}
	var entries []any
	for _, t := range toks {
		e := map[string]any{"token": t, "logprob": -0.01, "top_logprobs": []alt{{t, -0.01}}}
		if t == head {
			top := []alt{{head, math.Log(0.9)}}
			for j, l := range k.labels {
				if j != i {
					h, _ := split3(l)
					top = append(top, alt{h, math.Log(0.08 / float64(len(k.labels)-1))})
				}
			}
			top = append(top, alt{"The", math.Log(0.02)})
			if req.TopLogprobs > 0 && req.TopLogprobs < len(top) {
				top = top[:req.TopLogprobs]
			}
			e = map[string]any{"token": head, "logprob": math.Log(0.9), "top_logprobs": top}
		}
		entries = append(entries, e)
	}
	ch["logprobs"] = map[string]any{"content": entries}
	return content, ch
}

func split3(s string) (string, string) {
	if len(s) <= 3 {
		return s, ""
	}
	return s[:3], s[3:]
}

// serveContext answers a client's questions about the context, as
// ContextAPI says (404 for the others, as a server without them does).
func (c *Chat) serveContext(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	path := r.URL.Path
	switch {
	case strings.HasSuffix(path, "/api/ps") && c.ContextAPI == ContextOllamaPS:
		fmt.Fprintf(w, `{"models":[{"name":"%[1]s:latest","model":"%[1]s:latest","size":1,"context_length":%[2]d}]}`, c.modelName(), c.Context)
	case strings.HasSuffix(path, "/api/show") && c.ContextAPI == ContextOllamaShow:
		fmt.Fprintf(w, `{"parameters":"num_ctx                        %d\nstop                           \"<|eot_id|>\"","model_info":{"general.architecture":"llama","llama.context_length":%d}}`, c.Context, 2*c.Context)
	case strings.HasSuffix(path, "/v1/models") && c.ContextAPI == ContextVLLM:
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","max_model_len":%d}]}`, c.modelName(), c.Context)
	default:
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("404 page not found"))
	}
}

func (c *Chat) modelName() string {
	if c.ContextModel != "" {
		return c.ContextModel
	}
	return "m"
}

// isContextPath reports whether r asks about the context rather than for a
// completion.
func isContextPath(p string) bool {
	return strings.HasSuffix(p, "/api/ps") || strings.HasSuffix(p, "/api/show") || strings.HasSuffix(p, "/v1/models")
}
