package provider

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/hfsent/hfsent/internal/redact"
)

// MaxReason bounds a server's reason as hfsent shows it, in characters.
const MaxReason = 200

// maxRequestID bounds a request id as shown.
const maxRequestID = 100

// serverReason is what a failed answer says about itself, as the
// huggingface_hub client reads it: the X-Error-Message header, then the
// JSON body's "error" (a string, a list of strings, or an object with a
// "message", as OpenAI-style servers send), "error_description",
// "errors[].message", "message" or "detail" (FastAPI: a string or a list of
// {"msg"}); or a short body that is neither JSON nor HTML, as it is. It
// returns "" when there is none. The result is raw: summarise it before
// showing it.
func serverReason(h http.Header, body []byte) string {
	var parts []string
	if v := h.Get("X-Error-Message"); v != "" {
		parts = append(parts, v)
	}
	trimmed := bytes.TrimSpace(body)
	var doc map[string]json.RawMessage
	switch {
	case len(trimmed) > 0 && trimmed[0] == '{' && json.Unmarshal(trimmed, &doc) == nil:
		parts = append(parts, jsonReasons(doc)...)
	case len(trimmed) > 0 && !looksHTML(h, trimmed) && utf8.Valid(trimmed) && trimmed[0] != '[':
		parts = append(parts, string(trimmed))
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p != "" && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}

func jsonReasons(doc map[string]json.RawMessage) []string {
	var out []string
	str := func(raw json.RawMessage) (string, bool) {
		var s string
		return s, json.Unmarshal(raw, &s) == nil
	}
	if raw, ok := doc["error"]; ok {
		var list []string
		var obj struct {
			Message string `json:"message"`
		}
		switch s, isStr := str(raw); {
		case isStr:
			if d, ok := str(doc["error_description"]); ok && d != "" {
				s += ": " + d
			}
			out = append(out, s)
		case json.Unmarshal(raw, &list) == nil:
			out = append(out, list...)
		case json.Unmarshal(raw, &obj) == nil:
			out = append(out, obj.Message)
		}
	} else if d, ok := str(doc["error_description"]); ok {
		out = append(out, d)
	}
	var errs []struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(doc["errors"], &errs) == nil {
		for _, e := range errs {
			out = append(out, e.Message)
		}
	}
	if m, ok := str(doc["message"]); ok {
		out = append(out, m)
	}
	if raw, ok := doc["detail"]; ok {
		var items []struct {
			Msg string `json:"msg"`
		}
		if s, ok := str(raw); ok {
			out = append(out, s)
		} else if json.Unmarshal(raw, &items) == nil {
			for _, it := range items {
				out = append(out, it.Msg)
			}
		}
	}
	return out
}

func looksHTML(h http.Header, body []byte) bool {
	if strings.Contains(strings.ToLower(h.Get("Content-Type")), "html") {
		return true
	}
	return len(body) > 0 && body[0] == '<'
}

// summarise makes a server's reason safe to write and log: one line (line
// breaks, tabs and other control or format characters become spaces, runs
// of spaces one), invalid UTF-8 replaced, the token and anything that looks
// like one (or a URL's credentials) redacted, and at most MaxReason
// characters.
func summarise(s string, secrets ...string) string {
	return redact.Line(s, MaxReason, secrets...)
}

// requestID is the id a Hugging Face server gave the call (x-request-id,
// else x-inference-id), to quote when asking its support: printable ASCII
// only, bounded.
func requestID(h http.Header) string {
	id := h.Get("X-Request-Id")
	if id == "" {
		id = h.Get("X-Inference-Id")
	}
	var b strings.Builder
	for i := 0; i < len(id) && b.Len() < maxRequestID; i++ {
		if c := id[i]; c > ' ' && c < 0x7f && c != '"' && c != '\\' {
			b.WriteByte(c)
		}
	}
	return b.String()
}
