package cli

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/engine"
)

// lockedBuffer is a bytes.Buffer safe for the spinner's own goroutine and
// the logger to write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

var frameRE = regexp.MustCompile(`ok=(\d+) failed=(\d+) .*?\((\d+)/(\d+|-)`)

// Every frame drawn must show no more rows ok or failed than done: once
// "ok=48" was drawn next to "(40/340)", because the description was drawn
// before the count moved.
func TestProgressNeverShowsMoreDoneThanCounted(t *testing.T) {
	for _, total := range []int64{340, -1} {
		var buf lockedBuffer
		ios := &IOStreams{ErrOut: &buf}
		p := newProgress(ios, true, total)
		for _, s := range []engine.Progress{
			{Written: 40, OK: 38, Failed: 2, Active: 8},
			{Written: 48, OK: 46, Failed: 2, Active: 8},
			{Written: 340, OK: 330, Failed: 10},
		} {
			p.update(s)
			// Past the bar's 100ms throttle, so that each update may draw:
			// the check is on what is drawn, whatever the timing.
			time.Sleep(120 * time.Millisecond)
		}
		p.finish()
		frames := frameRE.FindAllStringSubmatch(buf.String(), -1)
		if len(frames) == 0 {
			t.Fatalf("total %d: no frame drawn: %q", total, buf.String())
		}
		for _, f := range frames {
			ok, _ := strconv.Atoi(f[1])
			failed, _ := strconv.Atoi(f[2])
			done, _ := strconv.Atoi(f[3])
			if ok+failed > done {
				t.Errorf("total %d: frame shows ok=%d failed=%d but %d done: %q", total, ok, failed, done, f[0])
			}
		}
	}
}

// Reading stdin, the total is unknown: a spinner with the rows done and the
// rate, not a bar.
func TestProgressSpinnerOnStdin(t *testing.T) {
	var in strings.Builder
	in.WriteString("request_id,text\n")
	for i := range 200 {
		in.WriteString("r" + strconv.Itoa(i) + ",fine text " + strconv.Itoa(i) + "\n")
	}
	var out bytes.Buffer
	var errOut lockedBuffer
	ios := &IOStreams{In: strings.NewReader(in.String()), Out: &out, ErrOut: &errOut, Getenv: func(string) string { return "" }}
	if code := Main([]string{"classify", "-", "--provider", "local", "--progress"}, ios); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	e := errOut.String()
	if !regexp.MustCompile(`\(\d+/-, \d+ rows/(s|min|hr)\)`).MatchString(e) {
		t.Errorf("no spinner with a count and a rate on stderr: %q", e)
	}
	if strings.Contains(e, "/200") || strings.Contains(e, "%") {
		t.Errorf("a bar with a total was drawn for stdin: %q", e)
	}
}
