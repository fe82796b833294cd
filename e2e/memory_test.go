package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// Memory peaks are read from the real binary: /proc/PID/status VmHWM while
// it runs, and the kernel's own count of it (getrusage's ru_maxrss) once it
// has exited, whichever is higher.

var (
	plainOnce sync.Once
	plainPath string
	plainErr  error
)

// plainBin is hfsent built without -race (bin itself when the tests are
// not run with -race): memory is measured on what users run.
func plainBin(t *testing.T) string {
	t.Helper()
	if raceFlag == "" {
		return bin
	}
	plainOnce.Do(func() {
		plainPath = filepath.Join(filepath.Dir(bin), "hfsent-plain")
		out, err := exec.Command("go", "build", "-o", plainPath, "github.com/hfsent/hfsent/cmd/hfsent").CombinedOutput()
		if err != nil {
			plainErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	return plainPath
}

type measured struct {
	result
	peakMiB float64
}

// runMeasured runs the plain binary to the end with env added and stdin
// (nil: none), and measures its peak resident memory.
func runMeasured(t *testing.T, env []string, stdin io.Reader, args ...string) measured {
	t.Helper()
	return measureProgram(t, env, stdin, plainBin(t), args...)
}

// runMeasuredUnder is runMeasured with the binary's address space limited
// to limitMiB (ulimit -v): a run that would take the machine's memory
// (a build before a bound) dies out of memory instead.
func runMeasuredUnder(t *testing.T, limitMiB int, env []string, args ...string) measured {
	t.Helper()
	return measureProgram(t, env, nil, "/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -v %d && exec "$@"`, limitMiB<<10), "sh", plainBin(t)}, args...)...)
}

// measureProgram runs prog (which is, or execs, hfsent) to the end and
// measures its peak resident memory.
func measureProgram(t *testing.T, env []string, stdin io.Reader, prog string, args ...string) measured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	home := t.TempDir()
	cmd.Env = append([]string{"HOME=" + home, "HF_HOME=" + home, "PATH=" + os.Getenv("PATH")}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &stdout, &stderr, stdin
	// Linux starts a child's ru_maxrss at its parent's peak (the child is
	// a vfork of this process until it execs): past a big parent (this test
	// binary under -race, after the fleet tests) it says nothing of the
	// child, whose own peak the polls of VmHWM then give.
	parentHWM := vmHWM(os.Getpid())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	polled := make(chan int64, 1)
	go func() {
		var peak int64
		defer func() { polled <- peak }()
		for {
			peak = max(peak, vmHWM(cmd.Process.Pid))
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	peakKB := <-polled
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running hfsent: %v", err)
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru.Maxrss > parentHWM {
		peakKB = max(peakKB, ru.Maxrss)
	}
	return measured{result{cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()}, float64(peakKB) / 1024}
}

// vmHWM is the peak resident set of process pid, in KiB (0 once it is gone).
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// hugeFieldMB is the size of the one huge field the memory tests read.
const hugeFieldMB = 300

// writeHuge writes head, then n bytes of pattern repeated, then tail, to
// a new file in dir.
func writeHuge(t *testing.T, dir, head string, n int64, pattern, tail string) string {
	t.Helper()
	path := filepath.Join(dir, "huge.csv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString(head)
	block := strings.Repeat(pattern, (1<<20)/len(pattern))
	for left := n; left > 0; {
		k := min(left, int64(len(block)))
		w.WriteString(block[:k])
		left -= k
	}
	w.WriteString(tail)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// hugeFieldFile is a CSV whose second row's text is hugeFieldMB MB.
func hugeFieldFile(t *testing.T) string {
	return writeHuge(t, t.TempDir(), "request_id,text\nr1,a short and fine text\nr2,\"", hugeFieldMB<<20, "much too long, ",
		"\"\nr3,another fine text\n")
}

// One text of 300 MB: classify reads it twice (the check of the whole
// file, then the run), keeps at most --max-chars of it, marks the row
// invalid_input with its length, classifies the others, and stays under
// 200 MiB. Before, it held the whole field several times over (4.4 GB for
// a 1 GB field).
func TestHugeFieldClassifyInFlatMemory(t *testing.T) {
	in := hugeFieldFile(t)
	out := filepath.Join(t.TempDir(), "out.csv")
	m := runMeasured(t, nil, nil, "classify", in, "-o", out, "--provider", "local", "--include-text", "--no-progress")
	t.Logf("classify, one %d MB field: peak RSS %.1f MiB", hugeFieldMB, m.peakMiB)
	if m.code != 1 {
		t.Fatalf("exit %d, want 1 (an invalid row)\n%s", m.code, m.stderr)
	}
	rows := readResults(t, out)
	if len(rows) != 3 || rows[0]["outcome"] != "success" || rows[2]["outcome"] != "success" {
		t.Fatalf("rows %v", rows)
	}
	want := fmt.Sprintf("text has %d characters, over --max-chars 5000", hugeFieldMB<<20)
	if rows[1]["outcome"] != "invalid_input" || rows[1]["error"] != want || len([]rune(rows[1]["text"])) != 5000 {
		t.Fatalf("row 2: %s %q, text of %d characters; want invalid_input %q and the first 5000", rows[1]["outcome"], rows[1]["error"], len([]rune(rows[1]["text"])), want)
	}
	if m.peakMiB > 200 {
		t.Fatalf("peak RSS %.0f MiB, want under 200", m.peakMiB)
	}
}

// A stray quote that is never closed swallows the rest of the file into one
// field: the file is refused (exit 2, before any call) naming the line where
// the quote opened, in flat memory.
func TestUnclosedQuoteInFlatMemory(t *testing.T) {
	in := writeHuge(t, t.TempDir(), "request_id,text\nr1,fine\nr2,fine\nr3,\"oops, a stray quote\nr4,", hugeFieldMB<<20, "r5,a row swallowed by the quote\n", "")
	m := runMeasured(t, nil, nil, "classify", in, "--provider", "local", "--no-progress")
	t.Logf("classify, an unclosed quote over %d MB: peak RSS %.1f MiB", hugeFieldMB, m.peakMiB)
	if m.code != 2 || !strings.Contains(m.stderr, "huge.csv:4: cannot parse CSV: a quote opened at line 4 is never closed") || m.stdout != "" {
		t.Fatalf("exit %d, stdout %d bytes, want 2 naming line 4:\n%s", m.code, len(m.stdout), m.stderr)
	}
	if m.peakMiB > 200 {
		t.Fatalf("peak RSS %.0f MiB, want under 200", m.peakMiB)
	}
}

// queue push of the same file: the row is stored invalid_input without its
// text (the database holds nothing of the 300 MB), the push exits 0 and
// stays under 200 MiB. Before, push held the field (6.9 GB for 1 GB) and
// sent it whole to PostgreSQL.
func TestHugeFieldPushInFlatMemory(t *testing.T) {
	db := pgtest.URL(t)
	in := hugeFieldFile(t)
	m := runMeasured(t, qenv(db), nil, "queue", "push", in, "--batch", "huge", "--no-progress")
	t.Logf("queue push, one %d MB field: peak RSS %.1f MiB", hugeFieldMB, m.peakMiB)
	if m.code != 0 || !strings.Contains(m.stderr, "3 rows pushed (1 invalid_input)") {
		t.Fatalf("exit %d\n%s", m.code, m.stderr)
	}
	conn := pgConn(t, db)
	var stored, longest int64
	var problem string
	if err := conn.QueryRow(context.Background(), `select sum(length(i.text)), max(length(i.text)), max(r.error)
		from hfsent.input i join hfsent.batch b on b.id = i.batch_id
		left join hfsent.result r on r.batch_id = i.batch_id and r.seq = i.seq
		where b.name = 'huge'`).Scan(&stored, &longest, &problem); err != nil {
		t.Fatal(err)
	}
	if longest > 100 || problem != fmt.Sprintf("text has %d characters, over --max-chars 5000", hugeFieldMB<<20) {
		t.Fatalf("the database holds %d characters of text (the longest %d), error %q", stored, longest, problem)
	}
	if m.peakMiB > 200 {
		t.Fatalf("peak RSS %.0f MiB, want under 200", m.peakMiB)
	}
}

// A push from stdin (read once, so not checked before) that ends in an
// unclosed quote: refused, exit 2, naming the line where the quote opened,
// in flat memory, and the batch it created is not left behind, empty.
// Before, PostgreSQL ran out of memory, push exited 1 and the batch stayed.
func TestUnclosedQuotePushLeavesNoBatch(t *testing.T) {
	db := pgtest.URL(t)
	in := writeHuge(t, t.TempDir(), "request_id,text\nr1,fine\nr2,fine\nr3,\"oops, a stray quote\nr4,", hugeFieldMB<<20, "r5,a row swallowed by the quote\n", "")
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := runMeasured(t, qenv(db), f, "queue", "push", "-", "--batch", "stray", "--no-progress")
	t.Logf("queue push -, an unclosed quote over %d MB: peak RSS %.1f MiB", hugeFieldMB, m.peakMiB)
	if m.code != 2 || !strings.Contains(m.stderr, "stdin:4: cannot parse CSV: a quote opened at line 4 is never closed") {
		t.Fatalf("exit %d, want 2 naming line 4:\n%s", m.code, m.stderr)
	}
	var n int
	if err := pgConn(t, db).QueryRow(context.Background(), "select count(*) from hfsent.batch where name = 'stray'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("the refused push left its batch behind")
	}
	if m.peakMiB > 200 {
		t.Fatalf("peak RSS %.0f MiB, want under 200", m.peakMiB)
	}
}

func pgConn(t *testing.T, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// serve with its default flags under many callers each sending a 1 MiB,
// 256-item /v1/classify body (within the defaults) as fast as they are
// answered: the bodies it reads and decodes at once are bounded by
// --body-budget, the rest answered 503 at once without being read, and
// the process stays well under the 512 MiB the README states. Before, 1,000
// such callers took it to 4.5 GB. (bench/serve_memory.sh runs the full
// 1,000 callers and the 63 MB bodies.)
func TestServeMemoryUnderBigBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("a load of 300 callers for 3 s")
	}
	fake := &fakehf.Fake{Latency: 20 * time.Millisecond, NoRecord: true}
	srv := fakehf.Start(fake)
	defer srv.Close()
	s := startServeBin(t, plainBin(t), "--endpoint", srv.URL)
	pid := s.cmd.Process.Pid

	// net/http's client logs each 503 written to a connection turned away
	// (--max-conns) before its request was sent.
	log.SetOutput(io.Discard)
	defer log.SetOutput(os.Stderr)
	body := bigItemsBody(256, 1<<20)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 300}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var mu sync.Mutex
	statuses := map[int]int{}
	var peak int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			mu.Lock()
			peak = max(peak, vmHWM(pid))
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()
	for range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.addr+"/v1/classify", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
					t.Error("a 503 without Retry-After")
				}
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	peak = max(peak, vmHWM(pid))
	t.Logf("serve, 300 callers of 1 MiB bodies for 3 s: %v; peak RSS %.1f MiB", statuses, float64(peak)/1024)
	if statuses[http.StatusServiceUnavailable] == 0 {
		t.Fatalf("answers %v: want those that did not fit answered 503", statuses)
	}
	// And the server answers as usual once the load is over.
	waitUntil(t, "an answer after the load", func() bool { return s.feedback("after", "a fine text").status == http.StatusOK })
	if float64(peak)/1024 > 512 {
		t.Fatalf("peak RSS %.0f MiB, over the 512 MiB stated", float64(peak)/1024)
	}
}

// bigItemsBody is {"items": [...]} of n items with different texts, about
// size bytes in all.
func bigItemsBody(n, size int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"items":[`)
	text := strings.Repeat("the parcel came late but the support was kind ", size/n/47)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"request_id":"r%d","text":"%d %s"}`, i, i, text)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}
