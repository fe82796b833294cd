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

// --hypothesis-template must hold exactly one {} and no other brace (the
// server fills it with Python's str.format): anything else, or the flag
// where no zero-shot model reads it, is exit 2 before any call, naming the
// flag.
func TestHypothesisTemplateRefusedBeforeAnyCall(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	chat := &fakehf.Chat{}
	chatSrv := fakehf.StartChat(chat)
	defer chatSrv.Close()
	in := writeFile(t, "in.csv", csvOf("a"))
	zs := []string{"--model", "facebook/bart-large-mnli", "--endpoint", srv.URL + "/models/{model}", "--labels", "bug,billing"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(zs, "--hypothesis-template", "This ticket is about billing."), "--hypothesis-template: the hypothesis template \"This ticket is about billing.\" holds {} 0 times: it takes exactly one"},
		{append(zs, "--hypothesis-template", "{} or {}?"), "holds {} 2 times"},
		{append(zs, "--hypothesis-template", "About {}, {0}."), "holds a brace besides its {}"},
		{append(zs, "--hypothesis-template", "About {} }"), "holds a brace besides its {}"},
		{append(zs, "--hypothesis-template", "{About {}"), "holds a brace besides its {}"},
		{append(zs, "--hypothesis-template", ""), "--hypothesis-template is empty"},
		{[]string{"--endpoint", srv.URL + "/models/{model}", "--hypothesis-template", "About {}."}, "--hypothesis-template needs the labels"},
		{chatArgs(chatSrv.URL, "--hypothesis-template", "About {}."), "--hypothesis-template is for a zero-shot model"},
	} {
		r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", append([]string{"classify", in, "-o", filepath.Join(t.TempDir(), "o.csv"), "--no-cache"}, c.args...)...)
		if r.code != ExitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: exit %d, want 2 with %q:\n%s", c.args[len(c.args)-2:], r.code, c.want, r.stderr)
		}
	}
	if f.Calls()+chat.Calls() != 0 {
		t.Fatalf("%d calls reached a provider", f.Calls()+chat.Calls())
	}
}

// A good template puts each label (its name, with --labels) in the
// sentence, sent as the hypotheses with the template "{}", and the answer
// is read back as the label's name.
func TestHypothesisTemplateSent(t *testing.T) {
	f := &fakehf.Fake{Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		return fakehf.Reply{Body: `{"sequence":"x","labels":["This ticket is about billing.","This ticket is about bug."],"scores":[0.8,0.2]}`}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	in := writeFile(t, "in.csv", "request_id,text\n1,charged twice\n")
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"HF_TOKEN": "hf_x"}, "", "classify", in, "-o", out, "--no-cache", "--model", "facebook/bart-large-mnli",
		"--endpoint", srv.URL+"/models/{model}", "--labels", "bug,billing", "--hypothesis-template", "This ticket is about {}.")
	b, _ := os.ReadFile(out)
	rows := parseResults(t, string(b))
	if r.code != 0 || rows[0]["label"] != "billing" || rows[0]["score"] != "0.8" {
		t.Fatalf("exit %d\n%s\n%s", r.code, b, r.stderr)
	}
	var req struct {
		Parameters struct {
			Candidates []string `json:"candidate_labels"`
			Template   string   `json:"hypothesis_template"`
		}
	}
	if err := json.Unmarshal(f.Bodies()[0], &req); err != nil || strings.Join(req.Parameters.Candidates, "|") != "This ticket is about bug.|This ticket is about billing." || req.Parameters.Template != "{}" {
		t.Fatalf("request %s", f.Bodies()[0])
	}
}
