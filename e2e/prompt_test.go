package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// promptPeakMiB bounds the memory of a run whose --prompt-file, or whose
// rendered prompt, is over its bound: what hfsent needs anyway (a run on
// the 13 sample rows peaks near 20 MiB), not the file or the prompt.
const promptPeakMiB = 60

// --prompt-file is read with a bound: a file of 300 MB peaked at 325 MB
// before its size was checked, and /dev/zero grew until the machine ran out
// (7.3 GB seen); now each is refused, exit 2, naming the flag, having read
// 64 KiB and a byte. /dev/zero runs under ulimit -v, so that a build
// without the bound dies out of memory instead of taking the machine's.
func TestPromptFileReadWithABound(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 3, uniqText)
	big := writeHuge(t, dir, "Pick one of {labels}: {text}\n", hugeFieldMB<<20, "more words of a prompt ", "")
	for _, c := range []struct {
		name string
		run  func(args ...string) measured
		file string
	}{
		{fmt.Sprintf("a %d MB file", hugeFieldMB), func(args ...string) measured { return runMeasured(t, nil, nil, args...) }, big},
		{"/dev/zero", func(args ...string) measured { return runMeasuredUnder(t, 2048, nil, args...) }, "/dev/zero"},
	} {
		m := c.run(append([]string{"classify", in, "-o", filepath.Join(dir, "out.csv"), "--no-progress", "--prompt-file", c.file}, chatFlags(srv.URL)...)...)
		t.Logf("--prompt-file %s: exit %d, peak RSS %.1f MiB", c.name, m.code, m.peakMiB)
		if m.code != 2 || !strings.Contains(m.stderr, "--prompt-file: "+c.file+" is larger than 64 KiB") {
			t.Errorf("--prompt-file %s: exit %d, want 2 naming the flag:\n%.500s", c.name, m.code, m.stderr)
		}
		if m.peakMiB > promptPeakMiB {
			t.Errorf("--prompt-file %s: peak RSS %.0f MiB, want under %d", c.name, m.peakMiB, promptPeakMiB)
		}
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls sent", f.Calls())
	}
}

// A template of 60 KB holding {text} 10,000 times made 35 MB requests of
// 3.5 KB texts: 235 MB of RSS for 8 rows. The rendered prompt is bounded
// (4 MiB) and counted before it is built: those rows are invalid_input,
// never sent, in flat memory, and the run goes on.
func TestRepeatedTextTemplateInFlatMemory(t *testing.T) {
	f := &fakehf.Chat{}
	srv := fakehf.StartChat(f)
	defer srv.Close()
	dir := t.TempDir()
	prompt := filepath.Join(dir, "prompt.txt")
	if err := os.WriteFile(prompt, []byte("Pick one of {labels}.\n"+strings.Repeat("{text}", 10_000)), 0o644); err != nil {
		t.Fatal(err)
	}
	in := writeInput(t, dir, 8, func(i int) string {
		return fmt.Sprintf("%s %d", strings.Repeat("a long review of the service ", 125), i)
	})
	out := filepath.Join(dir, "out.csv")
	m := runMeasured(t, nil, nil, append([]string{"classify", in, "-o", out, "--no-progress", "--prompt-file", prompt}, chatFlags(srv.URL)...)...)
	t.Logf("8 rows of 3.5 KB, {text} 10,000 times: exit %d, peak RSS %.1f MiB", m.code, m.peakMiB)
	if m.code != 1 {
		t.Fatalf("exit %d, want 1 (invalid rows)\n%s", m.code, m.stderr)
	}
	rows := readResults(t, out)
	for _, row := range rows {
		if row["outcome"] != "invalid_input" || !strings.Contains(row["error"], "--prompt-file holds {text} 10000 times") {
			t.Fatalf("row %v", row)
		}
	}
	if len(rows) != 8 || f.Calls() != 0 || !strings.Contains(m.stderr, "invalid_input=8") {
		t.Fatalf("%d rows, %d calls; want 8 invalid_input and none sent\n%s", len(rows), f.Calls(), m.stderr)
	}
	if m.peakMiB > promptPeakMiB {
		t.Fatalf("peak RSS %.0f MiB, want under %d", m.peakMiB, promptPeakMiB)
	}
}
