package cli

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/provider"
)

// TestLiveContract runs check against the real Hugging Face router. It is
// skipped unless HF_TOKEN and HFSENT_LIVE=1 are set; run it with -v to keep
// the record (model id, date, what the router answered):
//
//	HFSENT_LIVE=1 HF_TOKEN=hf_... go test ./internal/cli -run LiveContract -v
func TestLiveContract(t *testing.T) {
	if os.Getenv("HFSENT_LIVE") != "1" || os.Getenv("HF_TOKEN") == "" {
		t.Skip("live contract test: set HFSENT_LIVE=1 and HF_TOKEN to run it against the real router")
	}
	model := provider.DefaultModel
	if m := os.Getenv("HFSENT_LIVE_MODEL"); m != "" {
		model = m
	}
	code, out, stderr := ciRun(t, map[string]string{"HF_TOKEN": os.Getenv("HF_TOKEN")}, "check", "--model", model)
	t.Logf("live contract: model %s, date %s, hfsent %s\n%s", model, time.Now().UTC().Format(time.RFC3339), versionLine(), out)
	if code != ExitOK {
		t.Fatalf("check against the router: exit %d\n%s%s", code, out, stderr)
	}
	for _, want := range []string{"status:   200 OK", "shape:    nested", "label:    "} {
		if !strings.Contains(out, want) {
			t.Errorf("the router's answer changed: output lacks %q", want)
		}
	}
}
