package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// chatArgs are a chat run against the fake at url.
func chatArgs(url string, more ...string) []string {
	return append([]string{"--provider", "chat", "--model", "meta-llama/Llama-3.1-8B-Instruct:cerebras",
		"--endpoint", url + "/v1/chat/completions", "--labels", "positive, negative"}, more...)
}

func TestChatFlagsRefusedBeforeAnyCall(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a", "b"))
	noText := writeFile(t, "prompt.txt", "Pick one of {labels}.")
	withText := writeFile(t, "prompt.txt", "Pick one of {labels}: {text}")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--provider", "chat", "--model", "m", "--endpoint", srv.URL}, "--labels"},
		{[]string{"--provider", "chat", "--labels", "a,b", "--endpoint", srv.URL}, "--model"},
		{chatArgs(srv.URL, "--labels", "only"), "--labels"},
		{chatArgs(srv.URL, "--labels", "a,,b"), "--labels"},
		{chatArgs(srv.URL, "--labels", "yes,Yes"), "--labels"},
		{chatArgs(srv.URL, "--labels", strings.Repeat("x,", 100)+"y"), "--labels"},
		{chatArgs(srv.URL, "--prompt-file", noText), "{text}"},
		{chatArgs(srv.URL, "--prompt-file", filepath.Join(t.TempDir(), "none")), "--prompt-file"},
		{chatArgs(srv.URL, "--batch-size", "4"), "--batch-size"},
		{chatArgs(srv.URL, "--tpm", "-1"), "--tpm"},
		{chatArgs(srv.URL, "--tpm", "2000000000"), "--tpm"},
		{chatArgs(srv.URL, "--token-env", "NOT SET"), "--token-env"},
		{chatArgs(srv.URL, "--token-env", "UNSET_VAR"), "UNSET_VAR"},
		{[]string{"--prompt-file", withText}, "--prompt-file"},
		{[]string{"--tpm", "1000"}, "--tpm"},
		{[]string{"--tpm", "1000", "--fallback-model", "chat:m"}, "--tpm"},
		{[]string{"--provider", "tei", "--endpoint", srv.URL + "/predict", "--labels", "a,b"}, "--labels"},
		{[]string{"--labels", "a,b", "--fallback-model", "chat:m", "--fallback-endpoint", "http://h/x", "--prompt-file", noText}, "{text}"},
		{chatArgs(srv.URL, "--constrain", "grammar"), "--constrain"},
		{chatArgs(srv.URL, "--constrain", ""), "--constrain"},
		{[]string{"--constrain", "off"}, "--constrain"},
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

func TestClassifyChat(t *testing.T) {
	const key = "sk-local-0123456789abcdefghij"
	f := &fakehf.Chat{Token: key}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely staff\n2,terrible wait\n3,#unlabelled#\n4,fine #nologprobs#\n5,#context#\n6,lovely staff\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	sum := filepath.Join(t.TempDir(), "sum.json")
	r := runMain(t, map[string]string{"OPENAI_API_KEY": key}, "",
		append([]string{"classify", in, "-o", out, "--summary-json", sum, "--token-env", "OPENAI_API_KEY", "--retries", "2"}, chatArgs(srv.URL)...)...)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1 (two rows failed): %s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	want := []struct{ outcome, label, score string }{
		{"success", "positive", "0.9184"}, {"success", "negative", "0.9184"}, {"upstream_unlabelled", "", ""},
		{"success", "positive", ""}, {"upstream_request_rejected", "", ""}, {"success", "positive", "0.9184"},
	}
	for i, w := range want {
		row := rows[i]
		if row["outcome"] != w.outcome || row["label"] != w.label || row["score"] != w.score {
			t.Errorf("row %d: %v, want %+v", i+1, row, w)
		}
	}
	if rows[0]["prompt_tokens"] == "" || rows[0]["completion_tokens"] == "" || rows[0]["model"] != "meta-llama/Llama-3.1-8B-Instruct:cerebras" {
		t.Errorf("row 1: %v", rows[0])
	}
	// Row 3 is asked twice: both calls' tokens.
	if rows[2]["attempts"] != "2" || !strings.Contains(rows[2]["error"], "I cannot tell.") || rows[2]["prompt_tokens"] == "" {
		t.Errorf("row 3: %v", rows[2])
	}
	// Row 6 is row 1's text: reused, no call, no tokens.
	if rows[5]["prompt_tokens"] != "" || rows[5]["attempts"] != "0" {
		t.Errorf("row 6: %v", rows[5])
	}
	if !strings.Contains(r.stderr, "prompt_tokens=") || !strings.Contains(r.stderr, "completion_tokens=") || strings.Contains(r.stderr, key) {
		t.Errorf("summary: %s", r.stderr)
	}
	var js map[string]any
	sb, _ := os.ReadFile(sum)
	if err := json.Unmarshal(sb, &js); err != nil || js["prompt_tokens"].(float64) <= 0 || js["completion_tokens"].(float64) <= 0 {
		t.Errorf("summary json: %s", sb)
	}
	if strings.Contains(string(b), key) {
		t.Error("the key is in the results")
	}
}

// A 401 that echoes the key stops the run; the key is nowhere.
func TestChatAuthStopsAndNeverShowsTheKey(t *testing.T) {
	const key = "not-a-pattern-key-9876543210"
	f := &fakehf.Chat{Token: "another"}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a", "b", "c", "d"))
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"HF_TOKEN": key}, "", append([]string{"classify", in, "-o", out, "-c", "1", "--log-level", "debug"}, chatArgs(srv.URL)...)...)
	b, _ := os.ReadFile(out)
	if r.code != 1 || !strings.Contains(string(b), "upstream_auth") || !strings.Contains(string(b), "not_attempted") {
		t.Fatalf("exit %d\n%s\n%s", r.code, b, r.stderr)
	}
	if strings.Contains(string(b)+r.stderr+r.stdout, key) {
		t.Fatal("the key was shown")
	}
}

// A refused key that came from --token-env is looked for there: the advice
// names the variable, not HF_TOKEN.
func TestChatAuthAdviceNamesTheTokenEnv(t *testing.T) {
	f := &fakehf.Chat{Token: "the-right-one"}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a", "b"))
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"OPENAI_API_KEY": "a-wrong-one"}, "",
		append([]string{"classify", in, "-o", out, "-c", "1", "--token-env", "OPENAI_API_KEY"}, chatArgs(srv.URL)...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "check the token in OPENAI_API_KEY (--token-env)") || strings.Contains(r.stderr, "HF_TOKEN") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
}

func TestChatQuotaStopsTheRun(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,#quota#\n2,fine\n3,fine too\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append([]string{"classify", in, "-o", out, "-c", "1"}, chatArgs(srv.URL)...)...)
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	if r.code != 1 || rows[0]["outcome"] != "upstream_quota" || rows[1]["outcome"] != "not_attempted" || !strings.Contains(r.stderr, "quota") ||
		!strings.Contains(r.stderr, "the provider answered HTTP 429 (quota exceeded)") || strings.Contains(r.stderr, "answered HTTP 402") {
		t.Fatalf("exit %d\n%s\n%s", r.code, b, r.stderr)
	}
}

// --resume reads a results file written before the token columns, and
// one written with them.
func TestResumeReadsFilesWithAndWithoutTokenColumns(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely\n2,#unlabelled#\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	args := append([]string{"classify", in, "-o", out}, chatArgs(srv.URL)...)
	if r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", args...); r.code != 1 {
		t.Fatalf("first run: %d %s", r.code, r.stderr)
	}
	calls := f.Calls()
	if r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append(args, "--resume")...); r.code != 1 {
		t.Fatalf("resume: %d %s", r.code, r.stderr)
	}
	if got := f.Calls() - calls; got != 2 {
		t.Fatalf("resume sent %d calls, want 2 (row 2 redone, asked twice)", got)
	}
	// The same file without the token, cost and cached_prompt_tokens
	// columns, as an older hfsent wrote it.
	b, _ := os.ReadFile(out)
	var old []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		fields := strings.Split(line, ",")
		old = append(old, strings.Join(fields[:len(fields)-5], ","))
	}
	if err := os.WriteFile(out, []byte(strings.Join(old, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append(args, "--resume")...); r.code != 1 {
		t.Fatalf("resume of an old file: %d %s", r.code, r.stderr)
	}
	b, _ = os.ReadFile(out)
	if !strings.HasPrefix(string(b), "request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms,prompt_tokens,completion_tokens,cost_usd,cached,cached_prompt_tokens\n") ||
		!strings.Contains(string(b), "\n1,200,positive,0.9184,success,") {
		t.Fatalf("after resume:\n%s", b)
	}
}

// While hf-inference is down, a chat model answers with the primary's
// labels: --fallback-model chat:MODEL, here at a local server
// (--fallback-endpoint).
func TestChatFallbackWhileTextClassificationIsDown(t *testing.T) {
	hf := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return fakehf.Reply{Status: 500} }}
	hsrv := fakehf.Start(hf)
	defer hsrv.Close()
	chat := &fakehf.Chat{}
	csrv := fakehf.StartChat(chat)
	defer csrv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely\n2,terrible\n3,fine\n4,broke on day one\n5,great\n6,quick and kind\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", "classify", in, "-o", out, "-c", "1", "--retries", "1",
		"--breaker-min-calls", "2", "--breaker-threshold", "0.5", "--endpoint", hsrv.URL+"/models/{model}",
		"--fallback-model", "chat:meta-llama/Llama-3.1-8B-Instruct", "--fallback-endpoint", csrv.URL+"/v1/chat/completions")
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	fallback := 0
	for _, row := range rows {
		if row["outcome"] == "fallback" {
			fallback++
			if row["label"] != "POSITIVE" && row["label"] != "NEGATIVE" || row["model"] != "meta-llama/Llama-3.1-8B-Instruct" || row["prompt_tokens"] == "" {
				t.Errorf("fallback row %v: the default model's labels, as written, from the chat model", row)
			}
		}
	}
	if fallback < 3 || r.code != 0 && fallback == 0 {
		t.Fatalf("exit %d, %d fallback rows\n%s\n%s", r.code, fallback, b, r.stderr)
	}
	var req fakehf.ChatRequest
	_ = json.Unmarshal(chat.Bodies()[0], &req)
	if !strings.Contains(req.Messages[0].Content, "NEGATIVE, POSITIVE") {
		t.Fatalf("the fallback was not given the default model's labels: %+v", req.Messages)
	}
	for _, bad := range [][]string{
		{"--fallback-endpoint", csrv.URL},
		{"--fallback-model", "chat:m", "--model", "some/other-model"},
		{"--fallback-model", "chat:m", "--fallback-endpoint", "ftp://x"},
	} {
		r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append([]string{"classify", in, "-o", filepath.Join(t.TempDir(), "o.csv")}, bad...)...)
		if r.code != 2 {
			t.Errorf("%v: exit %d %s", bad, r.code, r.stderr)
		}
	}
}

func TestCheckChat(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	r := runMain(t, map[string]string{"MY_KEY": "sk-check-0123456789abcdef"}, "", "check", "--provider", "chat", "--model", "m",
		"--labels", "positive,negative", "--endpoint", srv.URL+"/v1/chat/completions", "--token-env", "MY_KEY")
	for _, want := range []string{"token:    found (MY_KEY)", "status:   200 OK", "label:    positive (score 0.9184)", "tokens:   ", "result:   ok"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, "sk-check") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runMain(t, nil, "", "check", "--provider", "chat", "--model", "m", "--endpoint", srv.URL); r.code != 2 || !strings.Contains(r.stderr, "--labels") {
		t.Fatalf("no labels: exit %d %s", r.code, r.stderr)
	}
	if r := runMain(t, nil, "", "check", "--constrain", "off"); r.code != 2 || !strings.Contains(r.stderr, "--constrain is for --provider chat") {
		t.Fatalf("--constrain for hf: exit %d %s", r.code, r.stderr)
	}
}

// check speaks of the chat provider in use: the constraint taken (after
// the server refused one), the context it read, and a chat model's
// advice, never a text-classification model's nor classify's ("twice",
// "the error column": check makes one call and writes no results).
func TestCheckChatSaysConstraintContextAndChatAdvice(t *testing.T) {
	f := &fakehf.Chat{Backend: fakehf.BackendTGI, Context: 4096, ContextAPI: fakehf.ContextVLLM, ContextModel: "m"}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	args := []string{"check", "--provider", "chat", "--model", "m", "--labels", "positive,negative", "--endpoint", srv.URL + "/v1/chat/completions"}
	r := runMain(t, nil, "", args...)
	for _, want := range []string{"constrain: regex: response_format {\"type\": \"regex\"} (TGI's grammar)", "context:  4096 tokens (vLLM's /v1/models (max_model_len))",
		"status:   200 OK", "result:   ok"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("check output lacks %q:\n%s", want, r.stdout)
		}
	}
	if r.code != 0 || !strings.Contains(r.stderr, "refused --constrain json-schema") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runMain(t, nil, "", append(args, "--text", "#unlabelled#", "--constrain", "off")...)
	if r.code != 1 || !strings.Contains(r.stdout, "outcome:  upstream_unlabelled") || strings.Contains(r.stdout, "twice") ||
		strings.Contains(r.stdout, "error column") || !strings.Contains(r.stdout, "context:  4096") {
		t.Fatalf("exit %d\n%s", r.code, r.stdout)
	}
	r = runMain(t, nil, "", append(args, "--text", "#context#")...)
	if r.code != 1 || strings.Contains(r.stdout, "text-classification") || !strings.Contains(r.stdout, "chat endpoint") {
		t.Fatalf("exit %d\n%s", r.code, r.stdout)
	}
}

// The stop of a chat run speaks of a chat endpoint, not of a
// text-classification model.
func TestChatEndpointStopSpeaksOfTheChatEndpoint(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusMethodNotAllowed)
	}))
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,fine\n2,fine too\n")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append([]string{"classify", in, "-o", filepath.Join(t.TempDir(), "o.csv"), "-c", "1"}, chatArgs(srv.URL)...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "stopped sending") || strings.Contains(r.stderr, "text-classification") ||
		!strings.Contains(r.stderr, "/v1/chat/completions") {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
}

// --labels with --provider hf asks a zero-shot model.
func TestClassifyZeroShot(t *testing.T) {
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		if strings.Contains(texts[0], "charged") {
			return fakehf.Reply{Body: `{"sequence":"x","labels":["billing","bug","praise"],"scores":[0.8,0.15,0.05]}`}
		}
		return fakehf.Reply{Body: `[{"label":"bug","score":0.7},{"label":"billing","score":0.2},{"label":"praise","score":0.1}]`}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,I was charged twice\n2,the app crashes\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", "classify", in, "-o", out, "--model", "facebook/bart-large-mnli",
		"--endpoint", srv.URL+"/models/{model}", "--labels", "bug,billing,praise")
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	if r.code != 0 || rows[0]["label"] != "billing" || rows[0]["score"] != "0.8" || rows[1]["label"] != "bug" || rows[1]["prompt_tokens"] != "" {
		t.Fatalf("exit %d\n%s\n%s", r.code, b, r.stderr)
	}
	var req map[string]any
	_ = json.Unmarshal(f.Bodies()[0], &req)
	if p, _ := req["parameters"].(map[string]any); p == nil || len(p["candidate_labels"].([]any)) != 3 {
		t.Fatalf("request %s", f.Bodies()[0])
	}
}

// --labels '"a,b",c' was three labels, `"a`, `b"` and `c`, and `"a` was
// written as a label with success; a label holding a zero-width or a
// bidirectional control character was taken, where a budget's or a
// batch's name holding one is refused. Both are refused now, exit 2 before
// any call, by classify, check and queue push alike.
func TestLabelsWithQuotesOrHiddenCharactersRefused(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a", "b"))
	for _, labels := range []string{`"a,b",c`, `a,"b"`, "pos\u200bitive,negative", "positive,\u202enegative", "positive,neg\u2066ative", "a,b\u00ad"} {
		for _, args := range [][]string{
			append([]string{"classify", in, "-o", filepath.Join(t.TempDir(), "out.csv")}, chatArgs(srv.URL, "--labels", labels)...),
			append([]string{"check"}, chatArgs(srv.URL, "--labels", labels)...),
			{"queue", "push", in, "--batch", "b", "--db", "postgres://127.0.0.1:1/none", "--provider", "chat", "--model", "m", "--labels", labels},
		} {
			cmd := args[:2]
			r := runMain(t, map[string]string{"HF_TOKEN": "hf_test"}, "", args...)
			if r.code != 2 || !strings.Contains(r.stderr, "--labels") || strings.Contains(r.stderr, "panic") {
				t.Errorf("%s --labels %q: exit %d, stderr %q; want 2 naming --labels", cmd[0], labels, r.code, r.stderr)
			}
		}
	}
	r := runMain(t, nil, "", "classify", in, "--provider", "chat", "--model", "m", "--endpoint", srv.URL, "--labels", `"a,b",c`)
	if !strings.Contains(r.stderr, "quote at character 1") {
		t.Errorf("the quote is not named: %s", r.stderr)
	}
	r = runMain(t, nil, "", "classify", in, "--provider", "chat", "--model", "m", "--endpoint", srv.URL, "--labels", "a,b\u200bc")
	if !strings.Contains(r.stderr, "U+200B at character 2") {
		t.Errorf("the zero-width space is not named: %s", r.stderr)
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls sent", f.Calls())
	}
}

// A template holding {text} 10,000 times sent requests of 35 MB for texts
// of 3.5 KB (235 MB of RSS for 8 rows), and --tpm reserved as if {text}
// were there once. Such rows are invalid_input now, before admission: no
// call, no slot, no tokens; the error says why and what to change, and
// the run goes on with the rows whose prompt fits (its 10,000 copies of
// "ok" are sent).
func TestPromptOverItsBoundIsInvalidInput(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	prompt := writeFile(t, "prompt.txt", "Pick one of {labels}.\n"+strings.Repeat("{text}", 10_000))
	var in strings.Builder
	in.WriteString("request_id,text\n")
	for i := range 8 {
		fmt.Fprintf(&in, "r%d,%s %d\n", i, strings.Repeat("a long review of the service ", 120), i)
	}
	in.WriteString("short,ok\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_test"}, "", append([]string{"classify", writeFile(t, "in.csv", in.String()), "-o", out,
		"--prompt-file", prompt}, chatArgs(srv.URL)...)...)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1: %s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	if len(rows) != 9 {
		t.Fatalf("exit %d, %d rows, want 1 and 9: %s", r.code, len(rows), r.stderr)
	}
	for _, row := range rows[:8] {
		if row["outcome"] != "invalid_input" || !strings.HasPrefix(row["error"], "the prompt would be 33.2 MiB, over the 4.0 MiB a prompt may hold: --prompt-file holds {text} 10000 times") || row["attempts"] != "0" {
			t.Fatalf("row %s: %s %q (attempts %s)", row["request_id"], row["outcome"], row["error"], row["attempts"])
		}
	}
	if rows[8]["outcome"] != "success" || f.Calls() != 1 {
		t.Fatalf("the short row: %v; %d calls, want 1", rows[8], f.Calls())
	}
	if n := len(f.Bodies()[0]); n > 40_000 {
		t.Fatalf("the one call sent %d bytes", n)
	}
}

// A call is priced at the service tier its answer says served it (issue
// 32): with a --prices file that gives the model a standard, a flex and a
// priority price, a row answered service_tier "flex" costs the flex price,
// "priority" the priority price, and "default" the standard one, in the
// results' cost_usd, the summary line and --summary-json's cost_usd. The
// run asks for flex, but the answer's tier, not the flag, is what prices a
// call: the server decides per call, so the fake answers a different tier
// for each row (named in the row's text).
func TestServiceTierPricedFromThePricesFile(t *testing.T) {
	// Every call reports the same usage, 1,000 prompt and 200 completion
	// tokens, so that a row's cost depends on its tier alone.
	const prompt, completion = 1000, 200
	f := &fakehf.Chat{Raw: func(req fakehf.ChatRequest) string {
		text := req.UserText()
		tier := text[strings.Index(text, "tier=")+len("tier="):]
		tier = strings.Fields(tier)[0]
		b, _ := json.Marshal(map[string]any{
			"object": "chat.completion", "model": req.Model, "service_tier": tier,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": `{"label": "positive"}`}}},
			"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
		})
		return string(b)
	}}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	// LiteLLM's format, with its *_cost_per_token_flex and _priority
	// fields. The three prices are no multiples of one another, and each
	// tier's input and output are in other ratios, so that a tier priced as
	// a discount on the standard price, or with its input and output
	// swapped, would show.
	prices := writeFile(t, "prices.json", `{
  "tiered-model": {
    "litellm_provider": "openai", "mode": "chat", "max_input_tokens": 128000,
    "input_cost_per_token": 1.0e-06, "output_cost_per_token": 4.0e-06,
    "input_cost_per_token_flex": 3.0e-07, "output_cost_per_token_flex": 1.7e-06,
    "input_cost_per_token_priority": 2.1e-06, "output_cost_per_token_priority": 9.0e-06
  }
}`)
	// By hand: standard 1000×1.0e-6 + 200×4.0e-6 = 0.0018; flex
	// 1000×0.3e-6 + 200×1.7e-6 = 0.00064; priority 1000×2.1e-6 +
	// 200×9.0e-6 = 0.0039. At the standard price all four would be 0.0072.
	want := map[string]float64{"f1": 0.00064, "p1": 0.0039, "d1": 0.0018, "f2": 0.00064}
	const total = 0.00064 + 0.0039 + 0.0018 + 0.00064 // 0.00698
	in := writeFile(t, "in.csv", "request_id,text\nf1,good tier=flex\np1,great tier=priority\nd1,fine tier=default\nf2,nice tier=flex\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	sum := filepath.Join(t.TempDir(), "sum.json")
	r := runMain(t, map[string]string{"OPENAI_API_KEY": "sk-test"}, "", "classify", in, "-o", out, "--summary-json", sum,
		"--no-cache", "--token-env", "OPENAI_API_KEY", "--provider", "chat", "--model", "tiered-model",
		"--endpoint", srv.URL+"/v1/chat/completions", "--labels", "positive, negative",
		"--service-tier", "flex", "--prices", prices)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), b)
	}
	near := func(a, b float64) bool { return a-b < 1e-10 && b-a < 1e-10 }
	for _, row := range rows {
		id := row["request_id"]
		// One call a row, with the fake's usage: the cost is that call's.
		if row["outcome"] != "success" || row["attempts"] != "1" || row["prompt_tokens"] != itoa(prompt) || row["completion_tokens"] != itoa(completion) {
			t.Fatalf("row %s: %v", id, row)
		}
		cost, err := strconv.ParseFloat(row["cost_usd"], 64)
		if err != nil || !near(cost, want[id]) {
			t.Errorf("row %s: cost_usd %q, want %v (its answer's tier's price)", id, row["cost_usd"], want[id])
		}
	}
	if s := readSummary(t, sum); s.CostUSD == nil {
		t.Errorf("--summary-json has no cost_usd, want %v", total)
	} else if !near(*s.CostUSD, total) {
		t.Errorf("--summary-json cost_usd %v, want %v", *s.CostUSD, total)
	}
	if !strings.Contains(r.stderr, " cost_usd=0.00698") {
		t.Errorf("summary line, want cost_usd=0.00698: %s", r.stderr)
	}
}
