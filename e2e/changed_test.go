package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// An input that changes while classify reads it (truncated, or grown) is
// noticed: the run says so, exits 2, and writes only rows read before the
// change, each one of the input's rows as it was, in order. Before, a
// truncated file ended at the cut with its torn last line taken as a row,
// and a grown one had its new rows processed, with exit 0 or 1.
func TestInputChangedDuringRun(t *testing.T) {
	const n = 20000
	for _, c := range []struct {
		name, want string
		change     func(path string, size int64) error
	}{
		{"truncated mid-line", "was truncated while it was read", func(path string, size int64) error {
			return os.Truncate(path, size/2+3)
		}},
		{"grown", "grew while it was read", func(path string, _ int64) error {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString("added-1,a row added during the run\nadded-2,another\n")
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := &fakehf.Fake{Latency: 5 * time.Millisecond}
			srv := fakehf.Start(fake)
			defer srv.Close()
			dir := t.TempDir()
			in := writeInput(t, dir, n, uniqText)
			st, err := os.Stat(in)
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out.csv")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd, stderr := hfsent(t, ctx, "classify", in, "-o", out, "--endpoint", srv.URL, "-c", "2", "--no-progress")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Change it once the run is under way (well before its end:
			// 20,000 rows at 2 calls of 5 ms take several seconds).
			waitRows(t, out, 50)
			if err := c.change(in, st.Size()); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 2 {
				t.Fatalf("exit %d, want 2\n%s", code, stderr.String())
			}
			if !strings.Contains(stderr.String(), c.want) || !strings.Contains(stderr.String(), "the input changed") {
				t.Fatalf("stderr does not say the input changed (%q):\n%s", c.want, stderr.String())
			}
			rows := readResults(t, out)
			if len(rows) == 0 || len(rows) >= n {
				t.Fatalf("%d rows written, want those before the change only", len(rows))
			}
			for i, r := range rows {
				if r["request_id"] != id(i) || r["outcome"] != "success" {
					t.Fatalf("row %d: %s %s %s, want %s success: a row read after the change was written", i, r["request_id"], r["outcome"], r["error"], id(i))
				}
			}
			if got := fake.Calls(); got != int64(len(rows)) {
				t.Fatalf("%d calls for %d rows written", got, len(rows))
			}
		})
	}
}
