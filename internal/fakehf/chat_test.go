package fakehf

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// A reasoning model's name (gpt-5*, o1*, o3*, o4*, with or without an
// org/ prefix) is refused max_tokens (400 unsupported_parameter) and a
// temperature other than the default 1 (400 unsupported_value), each
// naming its param, as OpenAI refuses them; it takes
// max_completion_tokens, temperature 1 or none. Any other model takes
// max_tokens and temperature 0 as it always did.
func TestChatReasoningModelParameters(t *testing.T) {
	srv := StartChat(&Chat{})
	defer srv.Close()
	post := func(model, params string) (int, string, string) {
		t.Helper()
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"lovely staff"}]` + params + `}`
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e struct {
			Error struct{ Message, Type, Param, Code string }
		}
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != 200 && (e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "'"+e.Error.Param+"'")) {
			t.Errorf("%s %s: %d %s: not OpenAI's error shape", model, params, resp.StatusCode, b)
		}
		return resp.StatusCode, e.Error.Code, e.Error.Param
	}
	for _, model := range []string{"gpt-5", "gpt-5-mini", "gpt-5-nano-2025-08-07", "o1", "o1-mini", "o3", "o3-mini", "o4-mini", "openai/gpt-5-nano", "openai/o4-mini"} {
		for _, c := range []struct {
			params      string
			code, param string // "": answered
		}{
			{`,"max_tokens":20`, "unsupported_parameter", "max_tokens"},
			{`,"max_tokens":20,"temperature":1`, "unsupported_parameter", "max_tokens"},
			{`,"temperature":0`, "unsupported_value", "temperature"},
			{`,"temperature":0.7,"max_completion_tokens":2000`, "unsupported_value", "temperature"},
			{`,"max_completion_tokens":2000`, "", ""},
			{`,"max_completion_tokens":2000,"temperature":1`, "", ""},
			{``, "", ""},
		} {
			st, code, param := post(model, c.params)
			if want := map[bool]int{true: 200, false: 400}[c.code == ""]; st != want || code != c.code || param != c.param {
				t.Errorf("%s with %s: %d %s on %q; want %d %s on %q", model, c.params, st, code, param, want, c.code, c.param)
			}
		}
	}
	for _, model := range []string{"gpt-4o-mini", "gpt-4.1-nano", "gpt-4o", "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"} {
		for _, params := range []string{`,"max_tokens":20,"temperature":0`, `,"max_tokens":20,"temperature":0.7`, `,"max_completion_tokens":20`} {
			if st, code, _ := post(model, params); st != 200 {
				t.Errorf("%s with %s: %d %s; want it answered", model, params, st, code)
			}
		}
	}
}
