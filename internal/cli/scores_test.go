package cli

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// classifyRows runs classify on in with args and returns the results'
// rows; it fails the test unless the exit code is want.
func classifyRows(t *testing.T, in string, want int, args ...string) []map[string]string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append([]string{"classify", in, "-o", out, "--no-cache"}, args...)...)
	b, _ := os.ReadFile(out)
	if r.code != want {
		t.Fatalf("exit %d, want %d\n%s\n%s", r.code, want, b, r.stderr)
	}
	return parseResults(t, string(b))
}

// --top-k writes the K best labels with their scores, best first, from
// each provider: a text-classification model's answer (asked for its K
// best), a zero-shot model's, a chat model's logprobs, the local model's
// three.
func TestTopKForEachProvider(t *testing.T) {
	tc := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `[[{"label":"joy","score":0.7},{"label":"anger","score":0.2},{"label":"fear","score":0.1}]]`}
	}}
	tcSrv := fakehf.Start(tc)
	defer tcSrv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely staff\n")
	rows := classifyRows(t, in, 0, "--endpoint", tcSrv.URL+"/models/{model}", "--top-k", "2")
	if rows[0]["label"] != "joy" || rows[0]["scores"] != "joy=0.7;anger=0.2" {
		t.Errorf("text-classification: %v", rows[0])
	}
	if !strings.Contains(string(tc.Bodies()[0]), `"top_k":2`) {
		t.Errorf("text-classification request: %s", tc.Bodies()[0])
	}

	zs := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `{"sequence":"x","labels":["bug","billing","praise"],"scores":[0.6,0.3,0.1]}`}
	}}
	zsSrv := fakehf.Start(zs)
	defer zsSrv.Close()
	rows = classifyRows(t, in, 0, "--endpoint", zsSrv.URL+"/models/{model}", "--model", "facebook/bart-large-mnli", "--labels", "bug,billing,praise", "--top-k", "3")
	if rows[0]["scores"] != "bug=0.6;billing=0.3;praise=0.1" {
		t.Errorf("zero-shot: %v", rows[0])
	}

	chat := &fakehf.Chat{}
	chatSrv := fakehf.StartChat(chat)
	defer chatSrv.Close()
	rows = classifyRows(t, in, 0, append(chatArgs(chatSrv.URL), "--top-k", "2")...)
	if rows[0]["label"] != "positive" || rows[0]["scores"] != "positive=0.9184;negative=0.0816" {
		t.Errorf("chat: %v", rows[0])
	}

	rows = classifyRows(t, in, 0, "--provider", "local", "--top-k", "1")
	if rows[0]["label"] != "POSITIVE" || !strings.HasPrefix(rows[0]["scores"], "NEUTRAL=") && !strings.HasPrefix(rows[0]["scores"], "POSITIVE=") || strings.Contains(rows[0]["scores"], ";") {
		t.Errorf("local: %v", rows[0])
	}
	rows = classifyRows(t, in, 0, "--provider", "local", "--top-k", "3")
	if strings.Count(rows[0]["scores"], ";") != 2 {
		t.Errorf("local's three: %v", rows[0])
	}
}

// --multi-label from each provider: a text-classification model's sigmoid
// scores thresholded at --label-threshold, a zero-shot model asked with
// multi_label, a chat model's array. label holds the chosen labels in the
// label set's order joined by ';', score the lowest of theirs, scores
// every label the answer scored.
func TestMultiLabelForEachProvider(t *testing.T) {
	tc := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `[[{"label":"toxic","score":0.9},{"label":"insult","score":0.6},{"label":"threat","score":0.1}]]`}
	}}
	tcSrv := fakehf.Start(tc)
	defer tcSrv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,you idiot\n")
	rows := classifyRows(t, in, 0, "--endpoint", tcSrv.URL+"/models/{model}", "--multi-label")
	if rows[0]["label"] != "insult;toxic" || rows[0]["score"] != "0.6" || rows[0]["scores"] != "toxic=0.9;insult=0.6;threat=0.1" {
		t.Errorf("text-classification: %v", rows[0])
	}
	if b := string(tc.Bodies()[0]); !strings.Contains(b, `"function_to_apply":"sigmoid"`) {
		t.Errorf("text-classification request: %s", b)
	}
	rows = classifyRows(t, in, 0, "--endpoint", tcSrv.URL+"/models/{model}", "--multi-label", "--label-threshold", "0.95")
	if rows[0]["label"] != "toxic" || rows[0]["score"] != "0.9" {
		t.Errorf("none over the threshold: the best: %v", rows[0])
	}

	zs := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `{"sequence":"x","labels":["late","billing","praise"],"scores":[0.8,0.7,0.05]}`}
	}}
	zsSrv := fakehf.Start(zs)
	defer zsSrv.Close()
	rows = classifyRows(t, in, 0, "--endpoint", zsSrv.URL+"/models/{model}", "--model", "facebook/bart-large-mnli", "--labels", "billing,late,praise", "--multi-label")
	if rows[0]["label"] != "billing;late" || rows[0]["score"] != "0.7" {
		t.Errorf("zero-shot: %v", rows[0])
	}
	var req struct {
		Parameters struct {
			Multi bool `json:"multi_label"`
		}
	}
	if err := json.Unmarshal(zs.Bodies()[0], &req); err != nil || !req.Parameters.Multi {
		t.Errorf("zero-shot request: %s", zs.Bodies()[0])
	}

	chat := &fakehf.Chat{Answer: func(string) string { return `{"labels":["late","billing"]}` }}
	chatSrv := fakehf.StartChat(chat)
	defer chatSrv.Close()
	rows = classifyRows(t, in, 0, "--provider", "chat", "--model", "m", "--endpoint", chatSrv.URL+"/v1/chat/completions",
		"--labels", "billing,late,praise", "--multi-label", "--constrain", "json-schema")
	if rows[0]["label"] != "billing;late" || rows[0]["score"] != "" {
		t.Errorf("chat: %v", rows[0])
	}
	var creq struct {
		ResponseFormat struct {
			JSONSchema struct {
				Schema struct {
					Properties struct {
						Labels struct {
							Type     string `json:"type"`
							MinItems int    `json:"minItems"`
							Items    struct {
								Enum []string `json:"enum"`
							} `json:"items"`
						} `json:"labels"`
					} `json:"properties"`
				} `json:"schema"`
			} `json:"json_schema"`
		} `json:"response_format"`
	}
	if err := json.Unmarshal(chat.Bodies()[0], &creq); err != nil {
		t.Fatal(err)
	}
	if l := creq.ResponseFormat.JSONSchema.Schema.Properties.Labels; l.Type != "array" || l.MinItems != 1 || len(l.Items.Enum) != 3 {
		t.Errorf("chat request: %s", chat.Bodies()[0])
	}
}

// The combinations that stay single-label are refused, saying so, before
// any call.
func TestMultiLabelRefusals(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a"))
	cal := writeFile(t, "cal.json", "{}")
	cascade := writeFile(t, "cascade.yaml", "stages:\n  - provider: chat\n    model: m\n    endpoint: "+srv.URL+"/v1/chat/completions\n    labels: a,b\n    multi-label: true\n")
	cases := []struct {
		args []string
		want string
	}{
		{append(chatArgs(srv.URL), "--multi-label", "--calibration", cal), "calibration stays single-label"},
		{[]string{"--cascade", cascade}, "cascade.yaml:6"},
		{append(chatArgs(srv.URL), "--multi-label", "--fallback-model", "local"), "single-label"},
		{[]string{"--provider", "local", "--multi-label"}, "--multi-label"},
		{append(chatArgs(srv.URL), "--label-threshold", "0.7"), "--label-threshold is for --multi-label"},
		{append(chatArgs(srv.URL), "--multi-label", "--top-k", "2"), "--top-k and --multi-label"},
		{append(chatArgs(srv.URL), "--top-k", "101"), "--top-k"},
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

// With --gold-column, a multi-label run's gold cells hold labels joined by
// ';', and the summary gives micro and macro F1, subset accuracy and the
// Hamming loss (the figures of TestMultiEvalHandComputed's rows).
func TestMultiLabelQualityReport(t *testing.T) {
	answers := map[string]string{
		"one":   `[[{"label":"billing","score":0.9},{"label":"late","score":0.2},{"label":"praise","score":0.1}]]`,
		"two":   `[[{"label":"late","score":0.8},{"label":"praise","score":0.7},{"label":"billing","score":0.1}]]`,
		"three": `[[{"label":"praise","score":0.9},{"label":"late","score":0.1},{"label":"billing","score":0.1}]]`,
		"four":  `[[{"label":"billing","score":0.9},{"label":"late","score":0.1},{"label":"praise","score":0.1}]]`,
	}
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: answers[texts[0]]}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text,gold\n1,one,billing;late\n2,two,late\n3,three,praise\n4,four,Billing\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	sum := filepath.Join(t.TempDir(), "sum.json")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", "classify", in, "-o", out, "--no-cache", "--summary-json", sum,
		"--endpoint", srv.URL+"/models/{model}", "--multi-label", "--gold-column", "gold")
	if r.code != 0 || !strings.Contains(r.stderr, "micro_f1=0.8000 macro_f1=0.7778 subset_accuracy=0.5000 hamming_loss=0.1667") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var js struct {
		Quality struct {
			Multi struct {
				HammingLoss float64 `json:"hamming_loss"`
			} `json:"multi_label"`
		} `json:"quality"`
	}
	b, _ := os.ReadFile(sum)
	if err := json.Unmarshal(b, &js); err != nil || js.Quality.Multi.HammingLoss < 0.16 || js.Quality.Multi.HammingLoss > 0.17 {
		t.Errorf("summary json: %s", b)
	}
}

// The repo's fake chat server, held to the array schema, answers an array
// of one label; each row gets it.
func TestMultiLabelChatAgainstTheFakesSchema(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,lovely staff\n2,terrible wait\n")
	rows := classifyRows(t, in, 0, append(chatArgs(srv.URL), "--multi-label")...)
	if rows[0]["label"] != "positive" || rows[1]["label"] != "negative" || rows[0]["score"] != "" {
		t.Fatalf("%v", rows)
	}
}

// A multi-label answer that is no list of labels is asked again with the
// multi-label correction (a list, not one label).
func TestMultiLabelChatSecondCallAsksForAList(t *testing.T) {
	f := &fakehf.Chat{Raw: func(req fakehf.ChatRequest) string {
		last := req.Messages[len(req.Messages)-1].Content
		content := "no idea"
		if len(req.Messages) > 2 && strings.HasPrefix(last, "That answer is not a list of the labels") {
			content = "late, billing"
		}
		b, _ := json.Marshal(map[string]any{"choices": []any{map[string]any{"message": map[string]any{"content": content}}}})
		return string(b)
	}}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,charged twice and late\n")
	rows := classifyRows(t, in, 0, "--provider", "chat", "--model", "m", "--endpoint", srv.URL+"/v1/chat/completions",
		"--labels", "billing,late,praise", "--multi-label", "--constrain", "off")
	if rows[0]["label"] != "billing;late" || rows[0]["attempts"] != "2" {
		t.Fatalf("%v", rows[0])
	}
}

// A row answered from an identical text's answer (--dedupe) has its
// scores too.
func TestTopKReusedRowHasItsScores(t *testing.T) {
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `[[{"label":"joy","score":0.7},{"label":"anger","score":0.2},{"label":"fear","score":0.1}]]`}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,same text\n2,same text\n")
	rows := classifyRows(t, in, 0, "--endpoint", srv.URL+"/models/{model}", "--top-k", "2", "-c", "1")
	if f.Calls() != 1 || rows[1]["scores"] != "joy=0.7;anger=0.2" {
		t.Fatalf("%d calls: %v", f.Calls(), rows)
	}
}

// --resume asks for the labels as the run it resumes did: with another
// --top-k (or --multi-label, --label-threshold, label set) the rows kept
// and the rows written would not match, so it is refused, exit 2 before
// any call, saying which setting changed and how to go on.
func TestResumeRefusesChangedLabelSettings(t *testing.T) {
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `[[{"label":"joy","score":0.7},{"label":"anger","score":0.2},{"label":"fear","score":0.1}]]`}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", csvOf("a", "b", "c"))
	out := filepath.Join(t.TempDir(), "out.csv")
	env := map[string]string{"HF_TOKEN": "hf_x"}
	args := func(extra ...string) []string {
		return append([]string{"classify", in, "-o", out, "--no-cache", "--endpoint", srv.URL + "/models/{model}"}, extra...)
	}
	if r := runMain(t, env, "", args("--top-k", "2")...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	first, _ := os.ReadFile(out)
	calls := f.Calls()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--top-k", "3"}, "its labels were asked for with --top-k 2, this run asks --top-k 3 (its rows would not match those already written): give the earlier run's settings (--top-k 2) to resume it; run without --resume to start over"},
		{nil, "with --top-k 2, this run asks no --top-k"},
	} {
		r := runMain(t, env, "", args(append(c.args, "--resume")...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("resume with %v: exit %d, want 2 with %q\n%s", c.args, r.code, c.want, r.stderr)
		}
	}
	if after, _ := os.ReadFile(out); string(after) != string(first) || f.Calls() != calls {
		t.Fatalf("a refused resume changed the output or made %d calls", f.Calls()-calls)
	}
	// The same settings resume it.
	if r := runMain(t, env, "", args("--top-k", "2", "--resume")...); r.code != 0 || !strings.Contains(r.stderr, "kept=3") {
		t.Fatalf("resume with the same --top-k: exit %d\n%s", r.code, r.stderr)
	}

	// A zero-shot run resumed with another label set, or another
	// hypothesis template, is refused too.
	zs := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `{"sequence":"x","labels":["bug","billing"],"scores":[0.6,0.4]}`}
	}}
	zsSrv := fakehf.Start(zs)
	defer zsSrv.Close()
	zsOut := filepath.Join(t.TempDir(), "zs.csv")
	zsArgs := func(extra ...string) []string {
		return append([]string{"classify", in, "-o", zsOut, "--no-cache", "--endpoint", zsSrv.URL + "/models/{model}", "--model", "facebook/bart-large-mnli"}, extra...)
	}
	if r := runMain(t, env, "", zsArgs("--labels", "bug,billing")...); r.code != 0 {
		t.Fatal(r.stderr)
	}
	for _, extra := range [][]string{{"--labels", "bug,billing,other"}, {"--labels", "bug,billing", "--hypothesis-template", "About {}."}} {
		r := runMain(t, env, "", zsArgs(append(extra, "--resume")...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, "its labels were asked for with the label set of sha256") {
			t.Errorf("resume with %v: exit %d\n%s", extra, r.code, r.stderr)
		}
	}
}
