package cli

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// echoedKey is a key with the characters that percent-encoding changes.
const echoedKey = "Local+Key/With=Odd:Chars-0123456789"

// echoes are the ways a server was seen to echo a key back, each of which
// reached the error column and stderr: only the exact string was redacted.
func echoes(key string) []string {
	return []string{
		key,
		strings.ToUpper(key),
		url.QueryEscape(key),
		url.PathEscape(key),
		hex.EncodeToString([]byte(key)),
		base64.StdEncoding.EncodeToString([]byte(key)),
		base64.URLEncoding.EncodeToString([]byte("Bearer " + key)),
		base64.StdEncoding.EncodeToString([]byte("api:" + key)),
	}
}

// others is how many leading characters of each of echoes encode
// something else than the key ("Bearer ", "api:").
var others = []int{0, 0, 0, 0, 0, 0, 9, 5}

// checkNoEcho fails when any part of a run shows an encoding of the key:
// a run of 9 characters of one (what may stay beside REDACTED is a
// character of a base64 text that mixes the key's bits with a
// neighbour's, and the padding).
func checkNoEcho(t *testing.T, where map[string]string) {
	t.Helper()
	for k, enc := range echoes(echoedKey) {
		for i := others[k]; i+9 <= len(enc); i++ {
			for name, s := range where {
				if part := enc[i : i+9]; strings.Contains(s, part) {
					t.Fatalf("%s shows %q of the key's encoding %q:\n%s", name, part, enc, s)
				}
			}
		}
	}
}

// A server that echoes the key URL-encoded, upper-cased, in hex or in
// base64 (alone, or in an encoded "Bearer KEY" or "user:KEY") gets every
// form redacted from the results, stderr and the summary: through the
// real clients, the Hugging Face one (its error's reason) and the chat
// one (an OpenAI-shaped error, and an answer that names no label).
func TestTokenEncodingsNeverPrinted(t *testing.T) {
	forms := echoes(echoedKey)
	// Each text names the form it gets: "... #c" the third. Texts with
	// "answer" in them are answered (so that a server answering calls
	// keeps the run going), the others refused with the key echoed.
	form := func(text string) int {
		// The chat client's follow-up ("named no label") ends otherwise:
		// it gets the first form rather than an index out of range.
		i := int(text[len(text)-1]) - 'a'
		if i < 0 || i >= len(forms) {
			return 0
		}
		return i
	}
	hf := &fakehf.Fake{Script: func(_ int64, texts []string, r *http.Request) fakehf.Reply {
		if strings.Contains(texts[0], "answer") {
			return fakehf.Reply{}
		}
		enc := echoes(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))[form(texts[0])]
		return fakehf.Reply{Status: 400, Body: `{"error":"your key ` + enc + ` is not valid for this model"}`}
	}}
	hfSrv := fakehf.Start(hf)
	defer hfSrv.Close()
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/chat/completions") {
			http.NotFound(w, r) // the client's look for the server's context
			return
		}
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		text := req.Messages[len(req.Messages)-1].Content
		enc := echoes(got)[form(text)]
		if strings.Contains(text, "answer") {
			b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"content": "I will not say, " + enc}}}})
			_, _ = w.Write(b)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "Incorrect API key provided: " + enc, "type": "invalid_request_error"}})
		_, _ = w.Write(b)
	}))
	defer chat.Close()

	var ids []string
	for i := range forms {
		ids = append(ids, "answer #"+string(rune('a'+i)), "error #"+string(rune('a'+i)))
	}
	in := writeFile(t, "in.csv", csvOf(ids...))
	for _, c := range []struct {
		name string
		args []string
	}{
		{"hf", []string{"--endpoint", hfSrv.URL}},
		{"chat", []string{"--provider", "chat", "--model", "m", "--labels", "a,b", "--endpoint", chat.URL + "/v1/chat/completions", "--prompt-file", writeFile(t, "p.txt", "{labels}: {text}")}},
	} {
		out := filepath.Join(t.TempDir(), "out.csv")
		sum := filepath.Join(t.TempDir(), "sum.json")
		r := runMain(t, map[string]string{"HF_TOKEN": echoedKey}, "", append([]string{"classify", in, "-o", out, "--summary-json", sum,
			"--log-level", "debug", "--retries", "0", "-c", "1"}, c.args...)...)
		res, _ := os.ReadFile(out)
		js, _ := os.ReadFile(sum)
		if !strings.Contains(string(res), "REDACTED") {
			t.Fatalf("%s: no echo reached the results (exit %d):\n%s\n%s", c.name, r.code, res, r.stderr)
		}
		checkNoEcho(t, map[string]string{c.name + " results": string(res), c.name + " stderr": r.stderr, c.name + " stdout": r.stdout, c.name + " summary": string(js)})
	}
}
