package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// feedbackYAML is a label file with a task, descriptions, examples with
// and without reasons, and a text that fits no label.
const feedbackYAML = `task: Classify customer feedback on home repair visits by how the customer feels.
labels:
  - name: positive
    description: The customer is glad of the service, even mildly.
    examples:
      - "Came on time and fixed the boiler in an hour."
      - text: "Fine, I suppose."
        reason: mild, but glad
  - name: negative
    description: The customer is unhappy with the visit.
examples:
  - text: "My cat likes the new radiator."
`

// labelChatArgs are a chat run against the fake at url with a label file
// in place of --labels.
func labelChatArgs(url string, more ...string) []string {
	return append([]string{"--provider", "chat", "--model", "gpt-4o-mini",
		"--endpoint", url + "/v1/chat/completions"}, more...)
}

// The label file is rendered as the system message, first, and every
// row's body is the same bytes but for the row's text: what a provider's
// prompt cache needs to reuse the fixed part.
func TestLabelFilePrefixIsByteIdentical(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	lf := writeFile(t, "labels.yaml", feedbackYAML)
	ex := writeFile(t, "ex.csv", "text,label\nGreat work.,Positive\nAwful.,negative\nLate again.,negative\n")
	const a, b = "lovely staff", "terrible wait; two hours late"
	in := writeFile(t, "in.csv", "request_id,text\n1,"+a+"\n2,"+b+"\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	// One call at a time: the bodies in the rows' order.
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append([]string{"classify", in, "-o", out, "-c", "1"},
		labelChatArgs(srv.URL, "--labels-file", lf, "--examples", ex, "--examples-per-label", "1")...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	bodies := f.Bodies()
	if len(bodies) != 2 {
		t.Fatalf("%d calls", len(bodies))
	}
	var req struct {
		Messages []struct{ Role, Content string }
	}
	if err := json.Unmarshal(bodies[0], &req); err != nil || len(req.Messages) != 2 || req.Messages[0].Role != "system" || req.Messages[1].Content != a {
		t.Fatalf("first body: %s", bodies[0])
	}
	sys := req.Messages[0].Content
	for _, want := range []string{"# Task", "The customer is glad of the service", `"Fine, I suppose." (reason: mild, but glad)`, "# Texts that fit none", "My cat"} {
		if !strings.Contains(sys, want) {
			t.Errorf("system message lacks %q:\n%s", want, sys)
		}
	}
	// One example of each label chosen from --examples (which one is the
	// labelset package's to test).
	if strings.Count(sys, "Great work.") != 1 || strings.Count(sys, "Awful.")+strings.Count(sys, "Late again.") != 1 {
		t.Errorf("examples chosen:\n%s", sys)
	}
	// The bodies are identical up to the text, and the text comes after
	// the whole fixed part.
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	ia, ib := bytes.Index(bodies[0], ja), bytes.Index(bodies[1], jb)
	if ia < 0 || ib != ia || !bytes.Equal(bodies[0][:ia], bodies[1][:ib]) ||
		!bytes.Equal(bodies[0][ia+len(ja):], bodies[1][ib+len(jb):]) {
		t.Fatalf("the bodies differ beyond the text:\n%s\n%s", bodies[0], bodies[1])
	}
	if !bytes.Contains(bodies[0][:ia], []byte("My cat")) {
		t.Fatal("the fixed part is not before the text")
	}
}

// A zero-shot model is sent the descriptions as its hypotheses, and the
// hypothesis it answers is read back as its label.
func TestLabelFileZeroShotHypotheses(t *testing.T) {
	const pos, neg = "The customer is glad of the service, even mildly.", "The customer is unhappy with the visit."
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `{"sequence":"x","labels":["` + neg + `","` + pos + `"],"scores":[0.7,0.3]}`}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	lf := writeFile(t, "labels.yaml", feedbackYAML)
	in := writeFile(t, "in.csv", "request_id,text\n1,late again\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", "classify", in, "-o", out, "--model", "facebook/bart-large-mnli",
		"--endpoint", srv.URL+"/models/{model}", "--labels-file", lf)
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	if r.code != 0 || rows[0]["label"] != "negative" || rows[0]["score"] != "0.7" {
		t.Fatalf("exit %d\n%s\n%s", r.code, b, r.stderr)
	}
	var req struct {
		Parameters struct {
			Candidates []string `json:"candidate_labels"`
			Template   string   `json:"hypothesis_template"`
		}
	}
	if err := json.Unmarshal(f.Bodies()[0], &req); err != nil || len(req.Parameters.Candidates) != 2 ||
		req.Parameters.Candidates[0] != pos || req.Parameters.Template != "{}" {
		t.Fatalf("request %s", f.Bodies()[0])
	}
	// The file's task and examples are not sent: said once, not in silence.
	if !strings.Contains(r.stderr, "level=WARN") || strings.Count(r.stderr, "its task and its 3 example(s) are not sent") != 1 {
		t.Errorf("no warning that the task and the examples are not sent:\n%s", r.stderr)
	}
	plain := writeFile(t, "plain.yaml", "labels:\n  - name: positive\n    description: "+pos+"\n  - name: negative\n    description: "+neg+"\n")
	r = runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", "classify", in, "-o", out, "--model", "facebook/bart-large-mnli",
		"--endpoint", srv.URL+"/models/{model}", "--labels-file", plain)
	if r.code != 0 || strings.Contains(r.stderr, "WARN") {
		t.Errorf("a file with nothing left out: exit %d, a warning:\n%s", r.code, r.stderr)
	}
}

// A label file that does not parse, an example naming no label, and the
// settings that contradict one are refused, exit 2 before any call,
// naming the file and the line (or the flag).
func TestLabelFileRefusedBeforeAnyCall(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a"))
	lf := writeFile(t, "labels.yaml", feedbackYAML)
	bad := writeFile(t, "bad.yaml", "labels:\n  - name: a\n  - description: no name\n")
	noLabel := writeFile(t, "ex.csv", "text,label\nfine,positive\nodd,sideways\n")
	prompt := writeFile(t, "prompt.txt", "{labels}: {text}")
	// A model whose context the label file's fixed part alone is over.
	tiny := writeFile(t, "prices.json", `{"gpt-4o-mini": {"input_cost_per_token": 1.5e-07, "output_cost_per_token": 6e-07, "max_input_tokens": 50}}`)
	cases := []struct {
		args []string
		want string
	}{
		{labelChatArgs(srv.URL, "--labels-file", bad), "bad.yaml:3"},
		{labelChatArgs(srv.URL, "--labels-file", filepath.Join(t.TempDir(), "none.yaml")), "none.yaml"},
		{labelChatArgs(srv.URL, "--labels-file", lf, "--examples", noLabel), "ex.csv:3"},
		{labelChatArgs(srv.URL, "--labels-file", lf, "--labels", "a,b"), "--labels-file"},
		{labelChatArgs(srv.URL, "--labels-file", lf, "--prompt-file", prompt), "--prompt-file"},
		{labelChatArgs(srv.URL, "--labels-file", lf, "--examples", noLabel, "--examples-per-label", "0"), "--examples-per-label"},
		{labelChatArgs(srv.URL, "--labels", "a,b", "--examples-per-label", "2"), "--examples"},
		{labelChatArgs(srv.URL, "--examples", noLabel), "--examples needs the labels"},
		{labelChatArgs(srv.URL, "--labels-file", lf, "--prices", tiny), "over --model gpt-4o-mini's context of 50"},
		{labelChatArgs(srv.URL, "--labels-file", lf, "--price-cached-in", "0.1"), "--price-cached-in goes with --price-in"},
		{labelChatArgs(srv.URL, "--labels-file", lf, "--prices", tiny, "--price-cached-in", "0.1"), "--price-cached-in and --prices"},
	}
	for _, tc := range cases {
		args := append([]string{"classify", in, "-o", filepath.Join(t.TempDir(), "out.csv")}, tc.args...)
		r := runMain(t, map[string]string{"HF_TOKEN": "hf_test"}, "", args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls sent", f.Calls())
	}
}

// bigLabelFile is a label file whose fixed part passes OpenAI's 1,024
// tokens.
func bigLabelFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("task: Classify customer feedback on home repair visits.\nlabels:\n")
	for _, name := range []string{"positive", "negative"} {
		b.WriteString("  - name: " + name + "\n    description: >\n      ")
		b.WriteString(strings.Repeat("The customer writes of the visit in words that say how the visit went for them. ", 30))
		b.WriteString("\n")
	}
	return writeFile(t, "big.yaml", b.String())
}

// The prompt tokens the server read from its cache are read, written as
// cached_prompt_tokens (part of prompt_tokens) in the results and the
// summary, and priced once, at --price-cached-in.
func TestCachedPromptTokensPricedOnce(t *testing.T) {
	f := &fakehf.Chat{CacheMin: 1024}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely staff\n2,terrible wait\n3,lovely work\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	sum := filepath.Join(t.TempDir(), "sum.json")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append([]string{"classify", in, "-o", out, "-c", "1", "--summary-json", sum},
		labelChatArgs(srv.URL, "--labels-file", bigLabelFile(t), "--price-in", "0.15", "--price-out", "0.6", "--price-cached-in", "0.075")...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	var cachedSum int
	for i, row := range rows {
		var p, c, cached int
		var cost float64
		if _, err := fmt.Sscan(strings.Join([]string{row["prompt_tokens"], row["completion_tokens"], row["cached_prompt_tokens"], row["cost_usd"]}, " "), &p, &c, &cached, &cost); err != nil {
			t.Fatalf("row %d: %v: %v", i+1, row, err)
		}
		if (i == 0) != (cached == 0) || cached > p || (i > 0 && cached < 1024) {
			t.Errorf("row %d: cached %d of %d prompt tokens", i+1, cached, p)
		}
		want := float64(p-cached)*0.15e-6 + float64(cached)*0.075e-6 + float64(c)*0.6e-6
		if d := cost - want; d > 1e-9 || d < -1e-9 {
			t.Errorf("row %d: cost %v, want %v (prompt %d, cached %d, completion %d)", i+1, cost, want, p, cached, c)
		}
		cachedSum += cached
	}
	if !strings.Contains(r.stderr, "cached_prompt_tokens="+itoa(cachedSum)) {
		t.Errorf("summary: %s", r.stderr)
	}
	var js struct {
		Cached int `json:"cached_prompt_tokens"`
	}
	sb, _ := os.ReadFile(sum)
	if err := json.Unmarshal(sb, &js); err != nil || js.Cached != cachedSum {
		t.Errorf("summary json: %s", sb)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// --dry-run estimates the fixed part's tokens and says whether they reach
// the provider's cacheable minimum, without a call.
func TestDryRunSaysWhetherThePrefixIsCacheable(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely staff\n")
	for _, tc := range []struct{ file, want string }{
		{bigLabelFile(t), "reaches OpenAI's cacheable minimum of 1024 tokens"},
		{writeFile(t, "small.yaml", feedbackYAML), "under OpenAI's cacheable minimum of 1024 tokens"},
	} {
		r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append([]string{"classify", in, "--dry-run"},
			labelChatArgs(srv.URL, "--labels-file", tc.file)...)...)
		if r.code != 0 || !strings.Contains(r.stderr, "dry_run prefix stage=1 fixed_bytes=") || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("exit %d: %s; want %q", r.code, r.stderr, tc.want)
		}
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls", f.Calls())
	}
}
