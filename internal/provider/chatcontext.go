package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hfsent/hfsent/internal/outcome"
)

// ServerContext is the context window a chat server gives the model, as
// the server itself says: Tokens is 0 when it could not be read.
type ServerContext struct {
	Tokens int
	// Source names where it was read ("Ollama's /api/ps", ...), or why not.
	Source string
}

// Context is what the client read of the server's context (after the
// first answer, with ChatConfig.ReadContext): zero when not read.
func (c *Chat) Context() ServerContext {
	if v := c.serverCtx.Load(); v != nil {
		return *v
	}
	return ServerContext{}
}

// contextProbeTimeout bounds each question about the context.
const contextProbeTimeout = 3 * time.Second

// readContext asks the server, once, what context it gives the model:
// Ollama's /api/ps (the loaded model's context_length, exact; it is asked
// after the first answer, when the model is loaded), Ollama's /api/show
// (num_ctx, capped by the model's own context_length), or vLLM's
// /v1/models (max_model_len). A server that says none of these (the
// router, TGI, llama.cpp's server) leaves it unknown: truncation is then
// told by the usage alone.
func (c *Chat) readContext(ctx context.Context) {
	c.ctxOnce.Do(func() {
		sc := ServerContext{Source: "not readable at this endpoint (it answers neither Ollama's /api/ps or /api/show nor vLLM's /v1/models)"}
		root, ok := apiRoot(c.base.url)
		if ok {
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*contextProbeTimeout)
			defer cancel()
			for _, probe := range []func(context.Context, string) (int, string){c.ollamaPS, c.ollamaShow, c.vllmModels} {
				if n, src := probe(pctx, root); n > 0 {
					sc = ServerContext{Tokens: n, Source: src}
					break
				}
			}
		}
		c.serverCtx.Store(&sc)
		if sc.Tokens > 0 && c.cfg.Logger != nil {
			c.cfg.Logger.Info("the chat server's context", "tokens", sc.Tokens, "from", sc.Source)
		}
	})
}

// apiRoot is the server's root, from its chat completions URL: what comes
// before /v1/chat/completions (or /chat/completions).
func apiRoot(endpoint string) (string, bool) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", false
	}
	p := strings.TrimSuffix(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/v1/chat/completions"):
		p = strings.TrimSuffix(p, "/v1/chat/completions")
	case strings.HasSuffix(p, "/chat/completions"):
		p = strings.TrimSuffix(p, "/chat/completions")
	default:
		return "", false
	}
	u.Path, u.RawQuery, u.Fragment = p, "", ""
	return u.String(), true
}

// getJSON asks root+path (a GET without body, else a POST of body) and
// decodes a 200's JSON into v.
func (c *Chat) getJSON(ctx context.Context, root, path string, body any, v any) bool {
	ctx, cancel := context.WithTimeout(ctx, contextProbeTimeout)
	defer cancel()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		b, _ := json.Marshal(body)
		method, rd = http.MethodPost, bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, root+path, rd)
	if err != nil {
		return false
	}
	req.Header = c.base.headers
	resp, buf, release, err := c.base.exchange(req)
	if err != nil {
		return false
	}
	defer release()
	return resp.StatusCode == http.StatusOK && buf.Len() <= maxBody && json.Unmarshal(buf.Bytes(), v) == nil
}

// sameModel reports whether an Ollama model name is the --model asked
// ("tiny" is "tiny:latest").
func sameModel(name, model string) bool {
	return name == model || name == model+":latest" || strings.TrimSuffix(name, ":latest") == strings.TrimSuffix(model, ":latest")
}

func (c *Chat) ollamaPS(ctx context.Context, root string) (int, string) {
	var doc struct {
		Models []struct {
			Name          string `json:"name"`
			Model         string `json:"model"`
			ContextLength int    `json:"context_length"`
		} `json:"models"`
	}
	if !c.getJSON(ctx, root, "/api/ps", nil, &doc) {
		return 0, ""
	}
	for _, m := range doc.Models {
		if (sameModel(m.Name, c.cfg.Model) || sameModel(m.Model, c.cfg.Model)) && m.ContextLength > 0 {
			return m.ContextLength, "Ollama's /api/ps (the loaded model's context_length)"
		}
	}
	return 0, ""
}

var numCtxParam = regexp.MustCompile(`(?m)^num_ctx\s+([0-9]+)\s*$`)

func (c *Chat) ollamaShow(ctx context.Context, root string) (int, string) {
	var doc struct {
		Parameters string                     `json:"parameters"`
		ModelInfo  map[string]json.RawMessage `json:"model_info"`
	}
	if !c.getJSON(ctx, root, "/api/show", map[string]string{"model": c.cfg.Model}, &doc) {
		return 0, ""
	}
	m := numCtxParam.FindStringSubmatch(doc.Parameters)
	if m == nil {
		// Without num_ctx the server's default applies (OLLAMA_CONTEXT_LENGTH,
		// else one chosen by its memory): not known from here.
		return 0, ""
	}
	n, err := strconv.Atoi(m[1])
	if err != nil || n <= 0 {
		return 0, ""
	}
	// Ollama gives the model no more than it was trained for.
	for k, v := range doc.ModelInfo {
		var train int
		if strings.HasSuffix(k, ".context_length") && json.Unmarshal(v, &train) == nil && train > 0 {
			n = min(n, train)
		}
	}
	return n, "Ollama's /api/show (num_ctx)"
}

func (c *Chat) vllmModels(ctx context.Context, root string) (int, string) {
	var doc struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if !c.getJSON(ctx, root, "/v1/models", nil, &doc) {
		return 0, ""
	}
	for _, m := range doc.Data {
		if m.ID == c.cfg.Model && m.MaxModelLen > 0 {
			return m.MaxModelLen, "vLLM's /v1/models (max_model_len)"
		}
	}
	return 0, ""
}

// charsPerToken bounds how many characters a token of a prompt holds, for
// the fewest tokens a prompt can be: the tokenizers of today's models hold
// about 4 characters of English a token, fewer of other scripts and of
// code, and a run of one repeated character (spaces, dashes), which may be
// one long token, is counted as one character.
const charsPerToken = 6

// truncationSlack is how many tokens under that bound a count may fall
// before it says the prompt was cut: a short prompt's count says little.
const truncationSlack = 32

// minPromptTokens is the fewest tokens the messages can be.
func minPromptTokens(msgs []chatMessage) int {
	n := 0
	for _, m := range msgs {
		var prev rune = -1
		for _, r := range m.Content {
			if r != prev {
				n++
			}
			prev = r
		}
	}
	return n / charsPerToken
}

// truncated is the error for an answer whose prompt the server cut to fit
// its context (nil if it was not): it counted as many prompt tokens as its
// context holds, or far fewer than the prompt can be. Ollama does that
// silently: it keeps the first tokens and the tail, dropping the
// instruction, and answers 200.
func (c *Chat) truncated(u Usage, msgs []chatMessage) *Error {
	if !u.Known || u.Prompt <= 0 {
		return nil
	}
	sc := c.Context()
	var why string
	switch least := minPromptTokens(msgs); {
	case sc.Tokens > 0 && u.Prompt >= sc.Tokens:
		why = fmt.Sprintf("the server counted %d prompt tokens, all of its context of %d (%s)", u.Prompt, sc.Tokens, sc.Source)
	case u.Prompt+truncationSlack < least:
		why = fmt.Sprintf("the server counted %d prompt tokens for a prompt of at least %d", u.Prompt, least)
		if sc.Tokens > 0 {
			why += fmt.Sprintf(" (its context: %d)", sc.Tokens)
		}
	default:
		return nil
	}
	return &Error{Outcome: outcome.UpstreamTruncated, Status: 200, Usage: u,
		Msg: "the prompt was cut to fit the server's context and what was left answered: " + why +
			"; raise the model's context (Ollama: num_ctx, or OLLAMA_CONTEXT_LENGTH) or lower --max-chars"}
}

// maxAnswer bounds the answer an unlabelled error keeps for the row's
// second call.
const maxAnswer = 1000

// clip is s cut to at most n bytes, on a character boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
