package resume

import (
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// fixture is an input file, the identity of a run over it, and an output
// path beside it.
type fixture struct {
	dir, in, out string
	id           Identity
	ids          []string
}

func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	dir := t.TempDir()
	f := &fixture{dir: dir, in: filepath.Join(dir, "in.csv"), out: filepath.Join(dir, "out.csv")}
	var b strings.Builder
	b.WriteString("request_id,text\n")
	for i := range n {
		id := fmt.Sprintf("r%03d", i)
		f.ids = append(f.ids, id)
		fmt.Fprintf(&b, "%s,text of %s\n", id, id)
	}
	if err := os.WriteFile(f.in, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(b.String()))
	f.id = Identity{Input: f.in, InputSize: int64(b.Len()), InputSHA256: hex.EncodeToString(sum[:]),
		Provider: "hf", Model: "m", IDColumn: "request_id", TextColumn: "text"}
	return f
}

func (f *fixture) opts(resume bool) Options {
	return Options{Path: f.out, Identity: f.id, Resume: resume}
}

func row(id string, oc outcome.Code, model string) results.Row {
	r := results.Row{RequestID: id, Outcome: oc, Model: model, Attempts: 1, StartedMs: 1, FinishedMs: 2}
	if oc == outcome.Success {
		r.Label, r.Score = "POSITIVE", 0.9
	}
	return r
}

// input opens the fixture's input as the engine reads it.
func (f *fixture) input(t *testing.T) Source {
	t.Helper()
	file, err := os.Open(f.in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { file.Close() })
	r, err := input.NewReader(file, input.Options{Name: f.in, IDColumn: "request_id", TextColumn: "text"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// drive plays the engine for up to n rows (all when n < 0): a row with a
// final prior is written as it is, any other is answered success by model.
// It returns the rows that were "sent".
func drive(t *testing.T, o *Output, src Source, n int, model string) (sent []string, err error) {
	t.Helper()
	ps, _ := src.(interface {
		NextPrior() (input.Row, *results.Row, error)
	})
	for i := 0; n < 0 || i < n; i++ {
		var in input.Row
		var prior *results.Row
		var rerr error
		if ps != nil {
			in, prior, rerr = ps.NextPrior()
		} else {
			in, rerr = src.Next()
		}
		if errors.Is(rerr, io.EOF) {
			return sent, nil
		}
		if rerr != nil {
			t.Fatalf("reading: %v", rerr)
		}
		r := row(in.ID, outcome.Success, model)
		if prior != nil {
			r = *prior
		} else {
			sent = append(sent, in.ID)
		}
		if err := o.Write([]results.Row{r}); err != nil {
			return sent, err
		}
	}
	return sent, nil
}

// runFresh writes a whole output: the first rows with oc, the rest not
// reached (n rows in all).
func (f *fixture) runFresh(t *testing.T, n int, oc outcome.Code) {
	t.Helper()
	o, err := Open(f.opts(false))
	if err != nil {
		t.Fatal(err)
	}
	var rows []results.Row
	for _, id := range f.ids[:n] {
		rows = append(rows, row(id, oc, "m"))
	}
	if err := o.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(nil); err != nil {
		t.Fatal(err)
	}
}

func readRows(t *testing.T, path string) []map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v\n%s", path, err, b)
	}
	var out []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, h := range recs[0] {
			m[h] = r[i]
		}
		out = append(out, m)
	}
	return out
}

// wantRows checks one row per input id, in order, with the outcomes given
// by want (by index).
func wantRows(t *testing.T, path string, ids []string, want func(i int) string) {
	t.Helper()
	rows := readRows(t, path)
	if len(rows) != len(ids) {
		t.Fatalf("%d rows, want %d", len(rows), len(ids))
	}
	for i, r := range rows {
		if r["request_id"] != ids[i] || r["outcome"] != want(i) {
			t.Fatalf("row %d: %v, want %s %s", i, r, ids[i], want(i))
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// noLeftovers checks that nothing but the output and its sidecar is left.
func noLeftovers(t *testing.T, out string) {
	t.Helper()
	for _, p := range Beside(out) {
		if p != out+SidecarSuffix && exists(p) {
			t.Errorf("%s was left behind", filepath.Base(p))
		}
	}
}

// crash leaves everything as a kill -9 would: files closed by the system
// (the lock with them), nothing removed or renamed.
func (o *Output) crash() {
	if o.dst.f != nil {
		o.dst.f.Close()
	}
	if o.old != nil {
		o.old.Close()
	}
	if o.lock != nil {
		o.lock.f.Close()
	}
}

func TestFreshRunWritesHeaderSidecarAndLock(t *testing.T) {
	f := newFixture(t, 3)
	o, err := Open(f.opts(false))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.out + LockSuffix)
	if err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Fatalf("lock file during the run: %q, %v; want this PID", b, err)
	}
	if err := o.Write([]results.Row{row("r000", outcome.Success, "m")}); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(nil); err != nil {
		t.Fatal(err)
	}
	wantRows(t, f.out, f.ids[:1], func(int) string { return "success" })
	id, err := readIdentity(f.out + SidecarSuffix)
	if err != nil || id.Model != "m" || id.Input != f.in || id.Version != identityVersion {
		t.Fatalf("sidecar %+v, %v", id, err)
	}
	noLeftovers(t, f.out)
}

func TestSecondOpenIsRefusedWithThePID(t *testing.T) {
	f := newFixture(t, 3)
	first, err := Open(f.opts(false))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Write([]results.Row{row("r000", outcome.Success, "m")}); err != nil {
		t.Fatal(err)
	}
	for _, resume := range []bool{false, true} {
		_, err = Open(f.opts(resume))
		var le *LockedError
		if !errors.Is(err, ErrLocked) || !errors.As(err, &le) || le.PID != os.Getpid() ||
			!strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
			t.Fatalf("resume=%v: second Open: %v; want ErrLocked naming pid %d", resume, err, os.Getpid())
		}
	}
	if err := first.Close(nil); err != nil {
		t.Fatal(err)
	}
	// The refused runs changed nothing.
	wantRows(t, f.out, f.ids[:1], func(int) string { return "success" })
	// Released: the next run proceeds.
	o, err := Open(f.opts(true))
	if err != nil {
		t.Fatalf("after the first run ended: %v", err)
	}
	_ = o.Close(nil)
}

func TestLockOfACrashedRunIsTakenOver(t *testing.T) {
	f := newFixture(t, 3)
	o, err := Open(f.opts(false))
	if err != nil {
		t.Fatal(err)
	}
	o.crash()
	if !exists(f.out + LockSuffix) {
		t.Fatal("the lock file should outlive a crash")
	}
	o, err = Open(f.opts(false))
	if err != nil {
		t.Fatalf("a crashed run's lock file blocked the next run: %v", err)
	}
	b, _ := os.ReadFile(f.out + LockSuffix)
	if strings.TrimSpace(string(b)) != fmt.Sprint(os.Getpid()) {
		t.Fatalf("lock file holds %q", b)
	}
	_ = o.Close(nil)
}

// A lock file removed and made again under a run that opened the old one
// is not a lock: the run takes the file the path names now.
func TestLockFollowsThePath(t *testing.T) {
	f := newFixture(t, 1)
	path := f.out + LockSuffix
	stale, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if got, err := tryLock(stale); err != nil || !got {
		t.Fatalf("tryLock: %v %v", got, err)
	}
	if sameFile(stale, path) {
		t.Fatal("a removed lock file still matches its path")
	}
	l, err := lockOutput(f.out)
	if err != nil {
		t.Fatal(err)
	}
	defer l.release()
	if !sameFile(l.f, path) {
		t.Fatal("the lock is not on the file the path names")
	}
}

func TestResumeKeepsFinalRowsAndRedoesTheRest(t *testing.T) {
	f := newFixture(t, 10)
	// r000-r005 written: even ones final, odd ones failed; r006-r009 never
	// reached.
	o, err := Open(f.opts(false))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range f.ids[:6] {
		oc := outcome.Success
		if i%2 == 1 {
			oc = outcome.UpstreamFailed
		}
		if err := o.Write([]results.Row{row(id, oc, "m")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Close(nil); err != nil {
		t.Fatal(err)
	}

	o, err = Open(f.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	if !exists(f.out+TempSuffix) || !exists(f.out+TempIdentitySuffix) {
		t.Fatal("a resume writes its temp file and the temp file's identity")
	}
	sent, err := drive(t, o, o.Source(f.input(t)), -1, "m")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Close(nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sent, " "); got != "r001 r003 r005 r006 r007 r008 r009" {
		t.Fatalf("sent %s", got)
	}
	wantRows(t, f.out, f.ids, func(int) string { return "success" })
	noLeftovers(t, f.out)
}

// An interrupted resume copies the old rows it did not reach.
func TestInterruptedResumeKeepsTheRowsItDidNotReach(t *testing.T) {
	f := newFixture(t, 10)
	f.runFresh(t, 8, outcome.UpstreamFailed)
	o, err := Open(f.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drive(t, o, o.Source(f.input(t)), 3, "m"); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(nil); err != nil {
		t.Fatal(err)
	}
	wantRows(t, f.out, f.ids[:8], func(i int) string {
		if i < 3 {
			return "success"
		}
		return "upstream_failed"
	})
	noLeftovers(t, f.out)
}

// A run without --resume removes what a killed resume left, and a later
// resume merges nothing of it.
func TestFreshRunRemovesAKilledResumesTempFile(t *testing.T) {
	f := newFixture(t, 10)
	f.runFresh(t, 10, outcome.UpstreamFailed)
	o, err := Open(f.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drive(t, o, o.Source(f.input(t)), 4, "m"); err != nil {
		t.Fatal(err)
	}
	o.crash()
	if !exists(f.out + TempSuffix) {
		t.Fatal("nothing to test: the crash left no temp file")
	}

	f.runFresh(t, 10, outcome.UpstreamFailed)
	for _, p := range []string{f.out + TempSuffix, f.out + TempIdentitySuffix} {
		if exists(p) {
			t.Fatalf("%s survived a fresh run", filepath.Base(p))
		}
	}
	o, err = Open(f.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	sent, err := drive(t, o, o.Source(f.input(t)), -1, "m")
	if err != nil || len(sent) != 10 {
		t.Fatalf("sent %v (%v), want all 10 rows", sent, err)
	}
	_ = o.Close(nil)
}

// The recovery of TestResumeRecoversACutShortResume: the rows a killed
// resume finished are folded in and not asked for again.
func TestKilledResumeIsRecovered(t *testing.T) {
	f := newFixture(t, 10)
	f.runFresh(t, 10, outcome.UpstreamFailed)
	o, err := Open(f.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drive(t, o, o.Source(f.input(t)), 3, "m"); err != nil {
		t.Fatal(err)
	}
	o.crash()
	// and a torn fourth row
	tf, err := os.OpenFile(f.out+TempSuffix, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = tf.WriteString("r003,200,POSI")
	tf.Close()

	o, err = Open(f.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	sent, err := drive(t, o, o.Source(f.input(t)), -1, "m")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Close(nil); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(sent, " "); got != "r003 r004 r005 r006 r007 r008 r009" {
		t.Fatalf("sent %s: the killed resume's rows were asked for again", got)
	}
	wantRows(t, f.out, f.ids, func(int) string { return "success" })
	noLeftovers(t, f.out)
}

// A temp file that is not this run's is never merged: the old output is
// resumed as it is, and the temp file removed.
func TestForeignTempFileIsNotMerged(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, f *fixture)
	}{
		{"no identity", func(t *testing.T, f *fixture) { _ = os.Remove(f.out + TempIdentitySuffix) }},
		{"another model", func(t *testing.T, f *fixture) {
			id := f.id
			id.Model = "old/model"
			if err := writeIdentity(osFS{}, f.out+TempIdentitySuffix, id); err != nil {
				t.Fatal(err)
			}
		}},
		{"another input", func(t *testing.T, f *fixture) {
			id := f.id
			id.InputSHA256 = strings.Repeat("0", 64)
			if err := writeIdentity(osFS{}, f.out+TempIdentitySuffix, id); err != nil {
				t.Fatal(err)
			}
		}},
		{"ids that do not line up", func(t *testing.T, f *fixture) {
			var b bytes.Buffer
			w, _ := results.NewWriter(&b, false)
			_ = w.Write([]results.Row{row("r000", outcome.Success, "m"), row("zzz", outcome.Success, "m")})
			if err := os.WriteFile(f.out+TempSuffix, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"not a results file", func(t *testing.T, f *fixture) {
			if err := os.WriteFile(f.out+TempSuffix, []byte("a,b\n1,2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 6)
			f.runFresh(t, 6, outcome.UpstreamFailed)
			o, err := Open(f.opts(true))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := drive(t, o, o.Source(f.input(t)), 3, "stale"); err != nil {
				t.Fatal(err)
			}
			o.crash()
			tc.spoil(t, f)
			before, _ := os.ReadFile(f.out)

			o, err = Open(f.opts(true))
			if err != nil {
				t.Fatal(err)
			}
			if after, _ := os.ReadFile(f.out); !bytes.Equal(before, after) {
				t.Fatal("the output was changed by a temp file that is not this run's")
			}
			sent, err := drive(t, o, o.Source(f.input(t)), -1, "m")
			if err != nil {
				t.Fatal(err)
			}
			if err := o.Close(nil); err != nil {
				t.Fatal(err)
			}
			if len(sent) != 6 {
				t.Fatalf("sent %v, want all 6 rows", sent)
			}
			for i, r := range readRows(t, f.out) {
				if r["model"] != "m" || r["request_id"] != f.ids[i] {
					t.Fatalf("row %d came from the stale temp file: %v", i, r)
				}
			}
			noLeftovers(t, f.out)
		})
	}
}

func TestNonRegularOutputGetsNoSidecarNorLock(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no /dev/null")
	}
	f := newFixture(t, 2)
	opts := f.opts(false)
	opts.Path = os.DevNull
	for _, p := range Beside(os.DevNull) {
		if exists(p) {
			t.Skipf("%s exists already", p)
		}
	}
	t.Cleanup(func() {
		for _, p := range Beside(os.DevNull) {
			if exists(p) {
				_ = os.Remove(p)
				t.Errorf("%s was written", p)
			}
		}
	})
	o, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Write([]results.Row{row("r000", outcome.Success, "m")}); err != nil {
		t.Fatal(err)
	}
	if err := o.Close(nil); err != nil {
		t.Fatal(err)
	}
	opts.Resume = true
	if o, err := Open(opts); err == nil || !strings.Contains(err.Error(), "regular file") {
		if err == nil {
			_ = o.Close(nil)
		}
		t.Fatalf("--resume on %s: %v", os.DevNull, err)
	}
}

// testFS is the real file system with two faults on demand: writes to a
// file whose name ends with full fail (ENOSPC) once budget bytes are
// written, and, with windows, renaming a file that is open (or over one)
// fails, as on Windows.
type testFS struct {
	osFS
	full    string
	budget  int64
	windows bool

	mu   sync.Mutex
	open map[string]int
}

func (t *testFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := t.osFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open == nil {
		t.open = map[string]int{}
	}
	t.open[name]++
	return &testFile{file: f, fs: t, name: name}, nil
}

func (t *testFS) Rename(oldpath, newpath string) error {
	t.mu.Lock()
	busy := t.windows && (t.open[oldpath] > 0 || t.open[newpath] > 0)
	t.mu.Unlock()
	if busy {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: errors.New("the process cannot access the file because it is being used by another process")}
	}
	return t.osFS.Rename(oldpath, newpath)
}

type testFile struct {
	file
	fs     *testFS
	name   string
	closed bool
}

func (f *testFile) Write(p []byte) (int, error) {
	t := f.fs
	if t.full == "" || !strings.HasSuffix(f.name, t.full) {
		return f.file.Write(p)
	}
	t.mu.Lock()
	n := min(int64(len(p)), t.budget)
	t.budget -= n
	t.mu.Unlock()
	w, err := f.file.Write(p[:n])
	if err == nil && w < len(p) {
		err = &fs.PathError{Op: "write", Path: f.name, Err: syscall.ENOSPC}
	}
	return w, err
}

func (f *testFile) Close() error {
	if !f.closed {
		f.closed = true
		f.fs.mu.Lock()
		f.fs.open[f.name]--
		f.fs.mu.Unlock()
	}
	return f.file.Close()
}

// Windows refuses to rename an open file, or over one: the resume closes
// the temp file and the old output before its rename, both when it catches
// up during the run and when it ends early.
func TestResumeRenamesOnlyClosedFiles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drive int // rows the run processes; -1 all
	}{
		{"caught up during the run", -1},
		{"interrupted", 2},
		{"nothing processed", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 8)
			f.runFresh(t, 5, outcome.UpstreamFailed)
			tfs := &testFS{windows: true}
			opts := f.opts(true)
			opts.fs = tfs
			o, err := Open(opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := drive(t, o, o.Source(f.input(t)), tc.drive, "m"); err != nil {
				t.Fatalf("writing: %v", err)
			}
			if err := o.Close(nil); err != nil {
				t.Fatalf("close: %v", err)
			}
			rows := readRows(t, f.out)
			want := map[int]int{-1: 8, 2: 5, 0: 5}[tc.drive]
			if len(rows) != want {
				t.Fatalf("%d rows, want %d", len(rows), want)
			}
			noLeftovers(t, f.out)
			for name, n := range tfs.open {
				if n != 0 {
					t.Errorf("%s left open (%d)", filepath.Base(name), n)
				}
			}
		})
	}
}

// The same for the recovery of a killed resume.
func TestRecoveryRenamesOnlyClosedFiles(t *testing.T) {
	f := newFixture(t, 8)
	f.runFresh(t, 8, outcome.UpstreamFailed)
	o, err := Open(f.opts(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drive(t, o, o.Source(f.input(t)), 3, "m"); err != nil {
		t.Fatal(err)
	}
	o.crash()
	opts := f.opts(true)
	opts.fs = &testFS{windows: true}
	o, err = Open(opts)
	if err != nil {
		t.Fatalf("recovery: %v", err)
	}
	sent, _ := drive(t, o, o.Source(f.input(t)), -1, "m")
	if err := o.Close(nil); err != nil {
		t.Fatal(err)
	}
	if len(sent) != 5 {
		t.Fatalf("sent %v, want the 5 rows the killed resume had not done", sent)
	}
	noLeftovers(t, f.out)
}

// A full disk during a resume: the old output is left as it was, and no
// temp file (empty or partial) nor its identity is left behind.
func TestResumeOnAFullDisk(t *testing.T) {
	header := int64(len(strings.Join(results.Columns(false), ",")) + 1)
	for _, tc := range []struct {
		name    string
		full    string
		budget  int64
		openErr bool
	}{
		{"temp file: not even the header", TempSuffix, 0, true},
		{"temp file: half the header", TempSuffix, header / 2, true},
		{"temp file: after some rows", TempSuffix, header + 100, false},
		{"temp file's identity", TempIdentitySuffix + ".tmp", 10, true},
		{"recovery's merge", recoverSuffix, header + 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 40)
			f.runFresh(t, 30, outcome.UpstreamFailed)
			if tc.full == recoverSuffix {
				o, err := Open(f.opts(true))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := drive(t, o, o.Source(f.input(t)), 5, "m"); err != nil {
					t.Fatal(err)
				}
				o.crash()
			}
			before, _ := os.ReadFile(f.out)
			beforeTemp, _ := os.ReadFile(f.out + TempSuffix)
			opts := f.opts(true)
			opts.fs = &testFS{full: tc.full, budget: tc.budget}
			o, err := Open(opts)
			if tc.openErr {
				if err == nil {
					t.Fatal("Open succeeded on a full disk")
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				_, werr := drive(t, o, o.Source(f.input(t)), -1, "m")
				if !errors.Is(werr, syscall.ENOSPC) {
					t.Fatalf("write error %v, want ENOSPC", werr)
				}
				if err := o.Close(werr); err != nil {
					t.Fatal(err)
				}
			}
			if after, _ := os.ReadFile(f.out); !bytes.Equal(before, after) {
				t.Fatal("the old output was changed")
			}
			if tc.full == recoverSuffix {
				// The killed resume's rows are still there for the next try.
				if after, _ := os.ReadFile(f.out + TempSuffix); !bytes.Equal(beforeTemp, after) || !exists(f.out+TempIdentitySuffix) {
					t.Fatal("a failed recovery lost the killed resume's rows")
				}
				for _, p := range []string{f.out + recoverSuffix, f.out + LockSuffix} {
					if exists(p) {
						t.Errorf("%s left behind", filepath.Base(p))
					}
				}
				return
			}
			noLeftovers(t, f.out)
			// and the next resume, with room, finishes
			o, err = Open(f.opts(true))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := drive(t, o, o.Source(f.input(t)), -1, "m"); err != nil {
				t.Fatal(err)
			}
			if err := o.Close(nil); err != nil {
				t.Fatal(err)
			}
			wantRows(t, f.out, f.ids, func(int) string { return "success" })
		})
	}
}

// A full disk on a fresh run: Open fails and the lock is released.
func TestFreshRunOnAFullDisk(t *testing.T) {
	f := newFixture(t, 3)
	opts := f.opts(false)
	opts.fs = &testFS{full: "out.csv", budget: 5}
	if _, err := Open(opts); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("Open: %v", err)
	}
	if exists(f.out + LockSuffix) {
		t.Fatal("the lock file is left after a failed Open")
	}
	o, err := Open(f.opts(false))
	if err != nil {
		t.Fatalf("the lock outlived the failed Open: %v", err)
	}
	_ = o.Close(nil)
}

func TestResumeRefusals(t *testing.T) {
	f := newFixture(t, 4)
	f.runFresh(t, 4, outcome.UpstreamFailed)
	other := f.id
	other.Model = "other"
	topK := f.id
	topK.TopK = 3
	for _, tc := range []struct {
		name string
		opts Options
		prep func()
		want string
	}{
		{"another model", Options{Path: f.out, Identity: other, Resume: true}, nil, "--model other"},
		{"another --top-k", Options{Path: f.out, Identity: topK, Resume: true}, nil, "its labels were asked for with no --top-k, this run asks --top-k 3"},
		{"no sidecar", f.opts(true), func() { _ = os.Rename(f.out+SidecarSuffix, f.out+".saved") }, "cannot tell which input"},
		{"more rows than the input", f.opts(true), func() {
			_ = os.Rename(f.out+".saved", f.out+SidecarSuffix)
			_ = os.WriteFile(f.in, []byte("request_id,text\nr000,a\n"), 0o644)
		}, "more rows than the input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.prep != nil {
				tc.prep()
			}
			before, _ := os.ReadFile(f.out)
			_, err := Open(tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
			if after, _ := os.ReadFile(f.out); !bytes.Equal(before, after) {
				t.Fatal("a refused resume changed the output")
			}
			noLeftovers(t, f.out)
		})
	}
}

// A sidecar written before the label settings were recorded (version 1)
// says nothing of them: they are not compared.
func TestResumeOfAVersion1SidecarIgnoresLabelSettings(t *testing.T) {
	f := newFixture(t, 4)
	f.runFresh(t, 4, outcome.UpstreamFailed)
	id, err := readIdentity(f.out + SidecarSuffix)
	if err != nil {
		t.Fatal(err)
	}
	id.Version = 1
	if err := writeIdentity(osFS{}, f.out+SidecarSuffix, id); err != nil {
		t.Fatal(err)
	}
	cur := f.id
	cur.TopK, cur.LabelSet = 3, "abc"
	o, err := Open(Options{Path: f.out, Identity: cur, Resume: true})
	if err != nil {
		t.Fatalf("a version 1 sidecar refused: %v", err)
	}
	_ = o.Close(nil)
}
