package stage

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/hfsent/hfsent/internal/yamldoc"
)

// testFlags registers a few of the provider flags into c, as the cli
// registers them all.
func testFlags(c *Config) *pflag.FlagSet {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.StringVar(&c.Provider, "provider", "hf", "")
	fs.StringVar(&c.Model, "model", "m", "")
	fs.StringVar(&c.Endpoint, "endpoint", "", "")
	fs.StringVar(&c.Labels, "labels", "", "")
	fs.IntVarP(&c.Concurrency, "concurrency", "c", 8, "")
	fs.DurationVar(&c.Timeout, "timeout", 12*time.Second, "")
	fs.BoolVar(&c.Adaptive, "adaptive", false, "")
	fs.StringVar(&c.LabelMap, "label-map", "", "")
	fs.StringVar(&c.Calibration, "calibration", "", "")
	fs.StringVar(&c.FallbackModel, "fallback-model", "", "")
	fs.DurationVar(&c.AdmissionWait, "admission-wait", 0, "")
	fs.Float64Var(&c.EscalateBelow, "escalate-below", 0, "")
	return fs
}

// validConfig is a stage that passes Validate: the hf provider, settings
// in range, none of them given on the command line.
func validConfig() *Config {
	c := &Config{Provider: "hf", Model: "m", Concurrency: 8, Timeout: time.Second, ConnectTimeout: time.Second, RowDeadline: time.Minute,
		Burst: 1, BreakerThreshold: 0.3, BreakerWindow: time.Minute, BreakerMinCalls: 20, BreakerCooldown: time.Minute, Constrain: "auto"}
	c.Given = func(string) bool { return false }
	return c
}

// place is where err says it is: "FILE:LINE".
func place(err error) string {
	var ye *yamldoc.Error
	if errors.As(err, &ye) {
		return ye.File + ":" + strconv.Itoa(ye.Line)
	}
	if i := strings.Index(err.Error(), ": "); i > 0 {
		return err.Error()[:i]
	}
	return ""
}

func TestApplyConfig(t *testing.T) {
	c := &Config{}
	fs := testFlags(c)
	if err := fs.Parse([]string{"--concurrency", "3"}); err != nil {
		t.Fatal(err)
	}
	data := "# a config\nmodel: some/model   # the model\nconcurrency: 16\nlabels: [a, b, c]\nlabel-map:\n  LABEL_0: negative\n  LABEL_1: positive\nadaptive: true\ntimeout: 30s\nendpoint:\n"
	origins, err := ApplyConfig("cfg.yaml", []byte(data), fs)
	if err != nil {
		t.Fatal(err)
	}
	if c.Model != "some/model" || c.Labels != "a,b,c" || c.LabelMap != "LABEL_0=negative,LABEL_1=positive" || !c.Adaptive || c.Timeout != 30*time.Second {
		t.Fatalf("config %+v", c)
	}
	// The command line wins.
	if c.Concurrency != 3 {
		t.Fatalf("--concurrency 3 on the command line, the file's 16: got %d", c.Concurrency)
	}
	if origins["model"] != "cfg.yaml:2" || origins["labels"] != "cfg.yaml:4" || origins["concurrency"] != "" {
		t.Fatalf("origins %v", origins)
	}
	// A message about a flag the file set names its line.
	if err := origins.Wrap(errors.New("--labels: a label is empty")); err.Error() != "cfg.yaml:4: --labels: a label is empty" {
		t.Fatalf("wrapped: %v", err)
	}
	if err := origins.Wrap(errors.New("--concurrency must be between 1 and 4096, got 0")); strings.Contains(err.Error(), "cfg.yaml") {
		t.Fatalf("a flag the command line set was placed in the file: %v", err)
	}
}

// Every error of a config file names the file, the line and the key.
func TestApplyConfigErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct{ data, place, want string }{
		{"model: m\nconurrency: 4\n", "cfg.yaml:2", `unknown key "conurrency": it is no flag's long name`},
		{"model: m\nc: 4\n", "cfg.yaml:2", "a key is a flag's long name: concurrency"},
		{"model: m\n\nconcurrency: many\n", "cfg.yaml:3", `concurrency: invalid value "many"`},
		{"timeout: 3 parsecs\n", "cfg.yaml:1", "timeout: invalid value"},
		{"adaptive: maybe\n", "cfg.yaml:1", "adaptive: invalid value"},
		{"model:\n  name: x\n", "cfg.yaml:2", "model is a mapping: want a value"},
		{"labels: [a, [b]]\n", "cfg.yaml:1", "an item is a list"},
		{"config: other.yaml\n", "cfg.yaml:1", "a config file cannot name another"},
		{"model: a\nmodel: b\n", "cfg.yaml:2", `key "model" given twice`},
		{"- model: a\n", "cfg.yaml:1", "the config file is a list"},
		{"model: [unclosed\n", "cfg.yaml:2", "not valid YAML"},
		{"a: &x 1\nb: *x\n", "cfg.yaml:1", "anchor or alias"},
		{"model: \x01\n", "cfg.yaml:1", "a character YAML does not allow"},
	} {
		fs := testFlags(&Config{})
		_, err := ApplyConfig("cfg.yaml", []byte(c.data), fs)
		if err == nil || place(err) != c.place || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want %s: ...%s", c.data, err, c.place, c.want)
		}
	}
}

func TestLoadCascade(t *testing.T) {
	data := `# cheap first
stages:
  - provider: local
    calibration: local.json
    escalate-below: 0.8
    tuned:
      escalates: 0.25
      accuracy: 0.97
  - provider: chat
    model: strong
    labels: [positive, negative]
    concurrency: 4
`
	f, err := LoadCascade("c.yaml", []byte(data), testFlags)
	if err != nil {
		t.Fatal(err)
	}
	cs := f.Configs()
	if len(cs) != 2 || cs[0].Provider != "local" || cs[0].EscalateBelow != 0.8 || cs[1].Model != "strong" || cs[1].Labels != "positive,negative" || cs[1].Concurrency != 4 || cs[0].Concurrency != 8 {
		t.Fatalf("stages %+v %+v", cs[0], cs[1])
	}
	if !cs[1].Given("model") || cs[0].Given("model") {
		t.Fatal("Given does not say which keys a stage set")
	}
	if reach, ok := f.Reach(); !ok || len(reach) != 2 || reach[0] != 1 || reach[1] != 0.25 {
		t.Fatalf("reach %v %v", reach, ok)
	}
	if f.Stages[0].Tuned.Accuracy != 0.97 || f.Stages[1].Line != 9 || f.Stages[1].Lines["concurrency"] != 12 {
		t.Fatalf("tuned %+v, lines %d %v", f.Stages[0].Tuned, f.Stages[1].Line, f.Stages[1].Lines)
	}
	// An error about a stage is placed at the key it names, else at the
	// stage.
	if err := f.Wrap(1, errors.New("--concurrency must be between 1 and 4096, got 0")); !strings.HasPrefix(err.Error(), "c.yaml:12: stage 2: --concurrency") {
		t.Fatalf("placed: %v", err)
	}
	if err := f.Wrap(1, errors.New("--provider chat needs --labels")); !strings.HasPrefix(err.Error(), "c.yaml:9: stage 2: ") {
		t.Fatalf("placed at the first key named: %v", err)
	}
	if err := f.Wrap(0, errors.New("--bill-to is wrong")); !strings.HasPrefix(err.Error(), "c.yaml:3: stage 1: ") {
		t.Fatalf("placed at the stage: %v", err)
	}
	// The document keeps the user's comments and order: a tool that sets a
	// stage's keys in place (Node) writes the file back as it was.
	f.Stages[0].Node.Content[5].Value = "0.75" // escalate-below's value
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(f.Root); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.HasPrefix(got, "# cheap first\nstages:\n  - provider: local\n    calibration: local.json\n    escalate-below: 0.75\n") {
		t.Fatalf("written back:\n%s", got)
	}
	// Without tuned escalation rates, no reach.
	g, err := LoadCascade("c.yaml", []byte("stages:\n  - model: a\n  - model: b\n"), testFlags)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := g.Reach(); ok {
		t.Fatal("reach without tuned rates")
	}
}

func TestLoadCascadeErrorsNameTheLine(t *testing.T) {
	for _, c := range []struct{ data, place, want string }{
		{"", "c.yaml:1", "the cascade file is empty"},
		{"stage:\n  - model: a\n", "c.yaml:1", `unknown key "stage"`},
		{"stages: []\n", "c.yaml:1", "stages is empty"},
		{"stages:\n  - model: a\n    modle: b\n", "c.yaml:3", `stage 1: unknown key "modle"`},
		{"stages:\n  - model: a\n    escalate-below: 1.5\n  - model: b\n", "c.yaml:3", ""},
		{"stages:\n  - model: a\n    escalate-below: high\n  - model: b\n", "c.yaml:3", "stage 1: escalate-below: invalid value"},
		{"stages:\n  - model: a\n  - model: b\n    escalate-below: 0.5\n", "c.yaml:4", "stage 2: escalate-below on the last stage"},
		{"stages:\n  - model: a\n    fallback-model: local\n", "c.yaml:3", "a cascade's next stage is its fallback"},
		{"stages:\n  - model: a\n  - model: b\n    admission-wait: 1s\n", "c.yaml:4", "admission-wait is stage 1's"},
		{"stages:\n  - model: a\n    tuned:\n      escalates: 2\n  - model: b\n", "c.yaml:4", "tuned escalates is the text \"2\": want a share"},
		{"stages:\n  - model: a\n    tuned:\n      accuracy: 0.9\n  - model: b\n", "c.yaml:3", "tuned has no escalates"},
		{"stages:\n  - model\n", "c.yaml:2", "stage 1 is the text"},
		{"stages:\n" + strings.Repeat("  - model: a\n", 9), "c.yaml:10", "at most 8 stages"},
	} {
		f, err := LoadCascade("c.yaml", []byte(c.data), testFlags)
		if err == nil && f != nil {
			// Out of range is the stage's Validate's, placed by Wrap.
			for i, s := range f.Stages {
				if verr := s.Config.validAnswers(); verr != nil {
					err = f.Wrap(i, verr)
					break
				}
			}
		}
		if err == nil || place(err) != c.place || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want %s: ...%s", c.data, err, c.place, c.want)
		}
	}
}

// A stage's settings are checked as the flags are, and the message names
// the key; escalate-below needs the stage's calibration.
func TestStageValidate(t *testing.T) {
	base := validConfig
	c := base()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.EscalateBelow = 0.8
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "escalate-below needs a calibration") {
		t.Fatalf("escalate-below without a calibration: %v", err)
	}
	c = base()
	c.Provider = "chat"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--provider chat needs --model") {
		t.Fatalf("a chat stage without a model: %v", err)
	}
	c = base()
	c.Concurrency = 0
	if err := c.Validate(); err == nil || err.Error() != "--concurrency must be between 1 and 4096, got 0" {
		t.Fatalf("concurrency 0: %v", err)
	}
}

// The fallback stage --fallback-model makes: another model of the
// primary's kind asked at the router, with the primary's token and limits
// and none of its budget or calibration.
func TestFallbackStage(t *testing.T) {
	c := &Config{Provider: "hf", Model: "a", FallbackModel: "b", Concurrency: 3, RPS: 5, Calibration: "cal.json",
		Budget: Budget{Name: "fleet"}, TokenEnv: "MY_TOKEN", Given: func(string) bool { return false }}
	fb := c.Fallback()
	if fb == nil || fb.Provider != "hf" || fb.Model != "b" || fb.Concurrency != 3 || fb.RPS != 5 || fb.TokenEnv != "MY_TOKEN" ||
		fb.Calibration != "" || fb.Budget.Name != "" || fb.FallbackModel != "" || fb.Given != nil {
		t.Fatalf("fallback %+v", fb)
	}
	if l := (&Config{Provider: "hf", Model: "a", FallbackModel: "local"}).Fallback(); l == nil || l.Provider != "local" {
		t.Fatalf("local fallback %+v", l)
	}
	if (&Config{Provider: "local", FallbackModel: "b"}).Fallback() != nil || (&Config{Provider: "hf"}).Fallback() != nil {
		t.Fatal("a fallback stage for the embedded model, or without --fallback-model")
	}
	chat := &Config{Provider: "hf", Model: "distilbert/distilbert-base-uncased-finetuned-sst-2-english", FallbackModel: "chat:m", TPM: 5}
	if fb := chat.Fallback(); fb.Provider != "chat" || fb.Model != "m" || strings.Join(fb.labels, ",") != "NEGATIVE,POSITIVE" || fb.TPM != 0 {
		t.Fatalf("chat fallback %+v", fb)
	}
}

func FuzzLoadCascade(f *testing.F) {
	for _, s := range []string{
		"stages:\n  - provider: local\n    calibration: x.json\n    escalate-below: 0.5\n  - model: m\n",
		"stages: []\n", "stages:\n  - {model: a, labels: [x, y]}\n", "a: &x [*x]\n", "stages:\n  - tuned: {escalates: .5}\n",
		"model: m\nconcurrency: 3\nlabel-map: {a: b}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Never a panic, whatever the bytes; an error names the file.
		if cf, err := LoadCascade("f.yaml", data, testFlags); err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error not naming the file: %v", err)
			}
		} else {
			for i := range cf.Stages {
				_ = cf.Wrap(i, cf.Stages[i].Config.validAnswers())
			}
			_, _ = cf.Reach()
		}
		if _, err := ApplyConfig("f.yaml", data, testFlags(&Config{})); err != nil && !strings.HasPrefix(err.Error(), "f.yaml") {
			t.Fatalf("error not naming the file: %v", err)
		}
	})
}

// ReadFile refuses a file over MaxFileBytes before it is parsed, and
// names a file it cannot read.
func TestReadFile(t *testing.T) {
	big := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(big, []byte(strings.Repeat("#", MaxFileBytes+10)), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := ReadFile("--cascade", big)
	if err != nil || len(b) != MaxFileBytes+1 {
		t.Fatalf("read %d bytes, %v", len(b), err)
	}
	if _, err := LoadCascade(big, b, testFlags); err == nil || !strings.Contains(err.Error(), "is over") {
		t.Fatalf("a file over the bound: %v", err)
	}
	if _, err := ReadFile("--cascade", filepath.Join(t.TempDir(), "none.yaml")); err == nil || !strings.HasPrefix(err.Error(), "--cascade ") {
		t.Fatalf("a missing file: %v", err)
	}
}
