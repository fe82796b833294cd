package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// tuneGold is a real gold CSV of 600 rows: a third the embedded model
// answers POSITIVE (right), a third NEGATIVE (right), a third NEUTRAL
// (always wrong: their gold is POSITIVE or NEGATIVE).
func tuneGold(t *testing.T) (path, data string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("request_id,text,gold\n")
	for i := 0; i < 200; i++ {
		fmt.Fprintf(&b, "p%d,\"I love it, wonderful service %d\",POSITIVE\n", i, i)
		fmt.Fprintf(&b, "n%d,\"Terrible and awful, the worst %d\",NEGATIVE\n", i, i)
		fmt.Fprintf(&b, "u%d,The visit is booked for day %d,%s\n", i, i, []string{"POSITIVE", "NEGATIVE"}[i%2])
	}
	return writeFile(t, "gold.csv", b.String()), b.String()
}

// The embedded model, uncalibrated, then the gold fake right 93% of the
// time: tune fits stage 1's calibration, sends on its NEUTRAL answers,
// and reaches 0.95 on the held-out rows (2/3 right + 1/3 at 0.93), where
// neither stage alone does; a second tune is answered by the cache.
func TestTuneReachesTheTargetOnHeldOutRows(t *testing.T) {
	gold, data := tuneGold(t)
	g, err := fakehf.ReadGold(strings.NewReader(data), "text", "gold", 0.93)
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakehf.Chat{Gold: g}
	srv := fakehf.StartChat(fake)
	defer srv.Close()
	dir := t.TempDir()
	cascade := filepath.Join(dir, "cascade.yaml")
	if err := os.WriteFile(cascade, []byte(fmt.Sprintf(`# cheap first
stages:
  - provider: local   # free
  - provider: chat
    model: strong
    endpoint: %s/v1/chat/completions
    labels: [POSITIVE, NEGATIVE]
    price-in: 1
    price-out: 2
`, srv.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "tuned.yaml")
	env := map[string]string{"HOME": dir}
	r := runMain(t, env, "", "tune", gold, "--cascade", cascade, "--target-accuracy", "0.95", "-o", out)
	if r.code != 0 {
		t.Fatalf("exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"gold rows: 600", "tuned cascade", "reached on the held-out rows", "stage 1 escalate-below"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("no %q in:\n%s", want, r.stdout)
		}
	}
	var acc, share float64
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasPrefix(l, "tuned cascade") {
			var c, s1 float64
			fmt.Sscanf(strings.TrimPrefix(l, "tuned cascade"), "%f %f %f %f", &acc, &c, &s1, &share)
		}
	}
	if acc < 0.95 || share < 0.25 || share > 0.45 {
		t.Fatalf("held-out accuracy %.3f, share to stage 2 %.3f: want >= 0.95 and about a third:\n%s", acc, share, r.stdout)
	}
	tuned := readString(t, out)
	for _, want := range []string{"# cheap first", "# free", "escalate-below:", "tuned:", "escalates:", "calibration: " + strings.TrimSuffix(out, ".yaml") + ".stage1.cal.json"} {
		if !strings.Contains(tuned, want) {
			t.Fatalf("no %q in the tuned file:\n%s", want, tuned)
		}
	}
	// The tuned file runs as a cascade.
	if r := runMain(t, env, "", "classify", gold, "--cascade", out, "-o", filepath.Join(dir, "res.csv"), "--no-progress"); r.code != 0 {
		t.Fatalf("classify --cascade tuned: exit %d: %s", r.code, r.stderr)
	}
	calls := fake.Calls()
	if r := runMain(t, env, "", "tune", gold, "--cascade", cascade, "--target-accuracy", "0.95"); r.code != 0 || fake.Calls() != calls {
		t.Fatalf("second tune: exit %d, %d calls (want none): %s", r.code, fake.Calls()-calls, r.stderr)
	}
}

// A target no thresholds reach: tune says so, shows the best, writes
// nothing and exits 3.
func TestTuneSaysWhenTheTargetIsUnreachable(t *testing.T) {
	gold, data := tuneGold(t)
	g, err := fakehf.ReadGold(strings.NewReader(data), "text", "gold", 0.8)
	if err != nil {
		t.Fatal(err)
	}
	srv := fakehf.StartChat(&fakehf.Chat{Gold: g})
	defer srv.Close()
	cascade := writeFile(t, "cascade.yaml", fmt.Sprintf("stages:\n  - provider: local\n  - provider: chat\n    model: strong\n    endpoint: %s/v1/chat/completions\n    labels: [POSITIVE, NEGATIVE]\n", srv.URL))
	out := filepath.Join(t.TempDir(), "tuned.yaml")
	r := runMain(t, nil, "", "tune", gold, "--cascade", cascade, "--target-accuracy", "0.99", "-o", out)
	if r.code != ExitQuality {
		t.Fatalf("exit %d, want %d: %s %s", r.code, ExitQuality, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "NOT reach") || !strings.Contains(r.stderr, "not reached") || !strings.Contains(r.stdout, "tuned cascade") {
		t.Fatalf("no verdict:\n%s\n%s", r.stdout, r.stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a tuned file written for a target not reached")
	}
}

func TestTuneUsageErrors(t *testing.T) {
	gold, _ := tuneGold(t)
	cascade := writeFile(t, "cascade.yaml", "stages:\n  - provider: local\n")
	for _, args := range [][]string{
		{"tune", gold, "--target-accuracy", "0.9"},
		{"tune", gold, "--cascade", cascade},
		{"tune", gold, "--cascade", cascade, "--target-accuracy", "1.5"},
		{"tune", gold, "--cascade", cascade, "--target-accuracy", "0.9", "--max-cost-per-1k", "-1"},
		{"tune", filepath.Join(t.TempDir(), "none.csv"), "--cascade", cascade, "--target-accuracy", "0.9"},
	} {
		if r := runMain(t, nil, "", args...); r.code != ExitUsage {
			t.Errorf("%v: exit %d, want 2: %s", args, r.code, r.stderr)
		}
	}
}
