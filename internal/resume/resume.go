// Package resume owns the results file a classify run writes with -o: the
// lock that keeps a second run off it, the sidecar that says which input
// and model wrote it, and --resume, which checks an earlier file against
// the input, merges its final rows with the new ones through a temporary
// file, and folds in what a killed resume left behind.
//
// The life of a resumed output:
//
//	Open      lock; check the sidecar; recover a killed resume's temp file
//	          (if it is this run's); check the old rows against the input;
//	          write the temp file's identity, then create the temp file
//	Write     new rows go to the temp file; once it holds as many rows as
//	          the old file, it is closed and renamed over it (commit) and
//	          later rows are appended to the output
//	Close     copy the old rows the run did not reach, commit; after a
//	          write error before the commit, remove the temp file and keep
//	          the old output as it was; release the lock
//
// Until the commit the old output is untouched, so a crash never loses a
// kept row; a crash leaves the temp file and its identity, which the next
// --resume folds in.
package resume

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/results"
)

// Files kept beside OUTPUT.
const (
	// SidecarSuffix: the Identity of the run that wrote OUTPUT.
	SidecarSuffix = ".hfsent.json"
	// LockSuffix: the lock file, holding the PID of the run writing OUTPUT.
	LockSuffix = ".hfsent.lock"
	// TempSuffix: a resume's new file, renamed over OUTPUT once it holds at
	// least every row OUTPUT held.
	TempSuffix = ".hfsent-resume.tmp"
	// TempIdentitySuffix: the Identity of the resume that wrote the temp
	// file; without it, or with another, the temp file is not used.
	TempIdentitySuffix = ".hfsent-resume.json"
	// recoverSuffix: the merge of a killed resume's temp file with OUTPUT.
	recoverSuffix = ".hfsent-recover.tmp"
)

// Beside lists every file a run may write beside output.
func Beside(output string) []string {
	return []string{
		output + SidecarSuffix, output + SidecarSuffix + ".tmp",
		output + LockSuffix,
		output + TempSuffix,
		output + TempIdentitySuffix, output + TempIdentitySuffix + ".tmp",
		output + recoverSuffix,
	}
}

// Options says what to open.
type Options struct {
	Path string // the results file (-o); stdout is not this package's
	// Identity is this run's. A resume reads Identity.Input again to check
	// the old rows against it.
	Identity Identity
	// Read says how the input is read (columns, delimiter, encoding): a
	// resume reads it again to check the old rows against it.
	Read        input.Options
	IncludeText bool
	// Extra are the extra columns written (raw_score, review).
	Extra results.Extra
	// RawCSV writes outside text without the spreadsheet-formula guard.
	RawCSV bool
	Resume bool
	Logger *slog.Logger

	fs fileSystem // nil: the operating system's
}

// Source is the input as the engine reads it.
type Source interface {
	Next() (input.Row, error)
}

// Output is an open results file: write rows to it in input order (it is
// the engine's Sink), then Close it.
type Output struct {
	path string
	fs   fileSystem
	log  *slog.Logger
	lock *outputLock // nil for a device or a pipe
	w    *results.Writer
	dst  *target

	// A resume's state.
	resuming  bool
	old       file // the old output, read alongside the input until the commit
	stream    *results.Stream
	oldRows   int64 // complete rows in the old file
	consumed  int64 // old rows matched with input rows so far (the reader's)
	written   int64 // rows written to the new file (the writer's)
	committed bool  // the temp file has replaced the old one
	closed    bool
}

// target is the file under the results writer: a resume switches it from
// the temp file to the output after the rename.
type target struct{ f file }

var errNoFile = errors.New("the results file is closed")

func (t *target) Write(p []byte) (int, error) {
	if t.f == nil {
		return 0, errNoFile
	}
	return t.f.Write(p)
}

// Open prepares path for a run: a device or a pipe is opened as it is; a
// file (new or not) is locked for the run, and either truncated and given a
// sidecar, or, with Resume and earlier rows in it, set up to be merged.
// Every error is found before any row is processed; the caller reports it as
// a usage error.
func Open(opts Options) (out *Output, err error) {
	o := &Output{path: opts.Path, fs: opts.fs, log: opts.Logger, dst: &target{}}
	if o.fs == nil {
		o.fs = osFS{}
	}
	if o.log == nil {
		o.log = slog.New(slog.DiscardHandler)
	}
	opts.Identity.Version = identityVersion
	st, err := os.Stat(o.path)
	switch {
	case err == nil && st.IsDir():
		return nil, fmt.Errorf("--output %s is a directory", o.path)
	case err == nil && !st.Mode().IsRegular():
		if opts.Resume {
			return nil, fmt.Errorf("--resume needs --output to be a regular file: %s is a device or a pipe, which holds no earlier rows", o.path)
		}
		// Nothing is written beside a device or a pipe (no sidecar in
		// /dev), and there is nothing to lock: it keeps no rows.
		if err := o.create(opts); err != nil {
			o.release()
			return nil, err
		}
		return o, nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("cannot read output %s: %v", o.path, unwrap(err))
	}

	if o.lock, err = lockOutput(o.path); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			o.release()
		}
	}()
	if opts.Resume {
		// Looked at again under the lock: a run that held it may have
		// written meanwhile.
		st, err := os.Stat(o.path)
		switch {
		case err == nil && st.Size() > 0:
			if err := o.openResume(opts); err != nil {
				return nil, err
			}
			return o, nil
		case err == nil || errors.Is(err, fs.ErrNotExist):
			o.log.Info("--resume: no earlier results in " + o.path + "; starting from the first row")
		default:
			return nil, fmt.Errorf("cannot read output %s: %v", o.path, unwrap(err))
		}
	}
	o.removeStale()
	if err := o.create(opts); err != nil {
		return nil, err
	}
	// Written after the output is truncated: a crash in between leaves an
	// empty output, never old rows under a new identity.
	if err := writeIdentity(o.fs, o.path+SidecarSuffix, opts.Identity); err != nil {
		return nil, fmt.Errorf("cannot write %s: %v", o.path+SidecarSuffix, unwrap(err))
	}
	return o, nil
}

// create truncates (or creates) the output and writes the header.
func (o *Output) create(opts Options) error {
	f, err := o.fs.OpenFile(o.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("cannot create output %s: %v", o.path, unwrap(err))
	}
	o.dst.f = f
	if o.w, err = results.NewWriter(o.dst, opts.IncludeText, results.Raw(opts.RawCSV), results.WithExtra(opts.Extra)); err != nil {
		return fmt.Errorf("cannot write %s: %v", o.path, unwrap(err))
	}
	return nil
}

// removeStale removes what a killed resume left beside the output: a run
// that starts the output afresh must never have those rows merged into it
// later.
func (o *Output) removeStale() {
	tmp := o.path + TempSuffix
	if _, err := os.Stat(tmp); err == nil {
		o.log.Info("removing " + tmp + ", left by an earlier resume that was cut short: this run starts " + o.path + " afresh")
	}
	for _, p := range []string{tmp, o.path + TempIdentitySuffix, o.path + recoverSuffix} {
		if err := removeIfThere(o.fs, p); err != nil {
			o.log.Warn("cannot remove "+p, "err", unwrap(err))
		}
	}
}

// openResume checks that the existing output belongs to this input and
// model, reads it once through to check that it lines up with the input row
// by row (so a mismatch is refused before any call), and sets up the merge.
func (o *Output) openResume(opts Options) error {
	prev, err := readIdentity(o.path + SidecarSuffix)
	if err != nil {
		return fmt.Errorf("--resume: cannot tell which input and model %s belongs to (%s: %v); run without --resume to start over",
			o.path, o.path+SidecarSuffix, unwrap(err))
	}
	if why := opts.Identity.mismatch(prev); why != "" {
		return fmt.Errorf("--resume: %s does not belong to this run: %s; run without --resume to start over, or choose another --output", o.path, why)
	}
	if err := o.recover(opts); err != nil {
		return err
	}
	o.resuming = true
	if o.old, err = o.fs.OpenFile(o.path, os.O_RDONLY, 0); err != nil {
		return fmt.Errorf("cannot read output %s: %v", o.path, unwrap(err))
	}
	plan, err := o.check(opts)
	if err != nil {
		return err
	}
	if o.stream, err = openStream(o.old, opts.IncludeText); err != nil {
		return fmt.Errorf("--resume: %s: %v", o.path, err)
	}
	o.oldRows = plan.rows
	msg := fmt.Sprintf("--resume: %d rows kept from %s; %d earlier rows to redo, then the rows it had not reached", plan.kept, o.path, plan.rows-plan.kept)
	if plan.torn {
		msg += "; a torn last line was dropped"
	}
	o.log.Info(msg)

	// The identity first: a temp file without one is never used.
	tmpPath, idPath := o.path+TempSuffix, o.path+TempIdentitySuffix
	if err := writeIdentity(o.fs, idPath, opts.Identity); err != nil {
		_ = removeIfThere(o.fs, idPath)
		return fmt.Errorf("cannot write %s: %v", idPath, unwrap(err))
	}
	tmp, err := o.fs.OpenFile(tmpPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		o.abort()
		return fmt.Errorf("cannot create %s: %v", tmpPath, unwrap(err))
	}
	o.dst.f = tmp
	if o.w, err = results.NewWriter(o.dst, opts.IncludeText, results.Raw(opts.RawCSV), results.WithExtra(opts.Extra)); err != nil {
		o.abort()
		return fmt.Errorf("cannot write %s: %v", tmpPath, unwrap(err))
	}
	if plan.rows == 0 {
		if err := o.commit(true); err != nil {
			o.abort()
			return fmt.Errorf("cannot replace %s: %v", o.path, unwrap(err))
		}
	}
	return nil
}

type plan struct {
	rows, kept int64
	torn       bool
}

// check reads the old output alongside the input: row k of the output must
// carry the id of input row k (the output is always a prefix of the input,
// in order).
func (o *Output) check(opts Options) (plan, error) {
	var p plan
	stream, err := openStream(o.old, opts.IncludeText)
	if err != nil {
		return p, fmt.Errorf("--resume: %s: %v; run without --resume to start over", o.path, err)
	}
	defer stream.Close()
	in, closeIn, err := openInput(opts.Identity, opts.Read)
	if err != nil {
		return p, err
	}
	defer closeIn()
	for {
		prev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			p.torn = stream.Torn()
			return p, nil
		}
		if err != nil {
			return p, fmt.Errorf("--resume: %s: %v; run without --resume to start over", o.path, err)
		}
		row, err := in.Next()
		if err != nil {
			return p, fmt.Errorf("--resume: %s has more rows than the input %s; run without --resume to start over", o.path, opts.Identity.Input)
		}
		if !sameID(prev.RequestID, row.ID) {
			return p, fmt.Errorf("--resume: row %d of %s has request_id %q but the input's row %d has %q: the output belongs to another input",
				p.rows+1, o.path, prev.RequestID, p.rows+1, row.ID)
		}
		p.rows++
		if prev.Outcome.Final() {
			p.kept++
		}
	}
}

func openInput(id Identity, how input.Options) (*input.Reader, func(), error) {
	f, err := os.Open(id.Input)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open input %s: %v", id.Input, unwrap(err))
	}
	how.Name = id.Input
	if how.IDColumn == "" {
		how.IDColumn, how.TextColumn = id.IDColumn, id.TextColumn
	}
	in, err := input.NewReader(f, how)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return in, func() { f.Close() }, nil
}

func openStream(f file, includeText bool) (*results.Stream, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return results.NewStream(f, st.Size(), includeText)
}

// Source wraps the input. For a resume, each input row is paired with the
// old output's row at the same position, and a final one is passed on (as
// the prior of engine.PriorSource) to be written as it is, without a call.
func (o *Output) Source(in Source) Source {
	if !o.resuming {
		return in
	}
	return &resumeSource{in: in, o: o}
}

type resumeSource struct {
	in Source
	o  *Output
}

func (s *resumeSource) Next() (input.Row, error) {
	row, _, err := s.NextPrior()
	return row, err
}

func (s *resumeSource) NextPrior() (input.Row, *results.Row, error) {
	row, err := s.in.Next()
	o := s.o
	if err != nil || o.consumed >= o.oldRows {
		return row, nil, err
	}
	prev, err := o.stream.Next()
	if err != nil {
		return row, nil, &input.Error{Name: o.path, Msg: "cannot read the earlier results: " + err.Error()}
	}
	o.consumed++
	if !sameID(prev.RequestID, row.ID) {
		return row, nil, &input.Error{Name: o.path, Msg: fmt.Sprintf("row %d does not match the input", o.consumed)}
	}
	if !prev.Outcome.Final() {
		return row, nil, nil
	}
	return row, &prev, nil
}

// Write appends rows, in input order (the engine's Sink, called from one
// goroutine). During a resume, once the temp file holds as many rows as the
// old file, it has everything the old one had and replaces it.
func (o *Output) Write(rows []results.Row) error {
	if err := o.w.Write(rows); err != nil {
		return err
	}
	if !o.resuming || o.committed {
		return nil
	}
	o.written += int64(len(rows))
	if o.written >= o.oldRows {
		return o.commit(true)
	}
	return nil
}

// Freeze waits for a write in progress to end and refuses all later ones
// (a second Ctrl-C quits at once without a torn row).
func (o *Output) Freeze() bool { return o.w.Freeze() }

// commit puts the temp file in place of the output. Both are closed first
// (Windows cannot rename an open file, nor over one); every old row has been
// read by then. With more, the output is opened again for the rows that
// follow.
func (o *Output) commit(more bool) error {
	o.closeOld()
	tmp, tmpPath := o.dst.f, o.path+TempSuffix
	o.dst.f = nil
	serr := syncFile(tmp)
	if cerr := tmp.Close(); serr == nil {
		serr = cerr
	}
	if serr != nil {
		return serr
	}
	if err := o.fs.Rename(tmpPath, o.path); err != nil {
		return err
	}
	syncDir(filepath.Dir(o.path))
	o.committed = true
	_ = removeIfThere(o.fs, o.path+TempIdentitySuffix)
	if !more {
		return nil
	}
	f, err := o.fs.OpenFile(o.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("reopening %s after the resume's rename: %w", o.path, err)
	}
	o.dst.f = f
	return nil
}

// abort gives up a resume before its commit: the temp file and its
// identity are removed (no empty or partial file is left on a full disk),
// the old output is left as it was.
func (o *Output) abort() {
	if o.dst.f != nil {
		o.dst.f.Close()
		o.dst.f = nil
	}
	if !o.committed {
		_ = removeIfThere(o.fs, o.path+TempSuffix)
		_ = removeIfThere(o.fs, o.path+TempIdentitySuffix)
	}
}

// Close ends the output after the run; runErr is the run's write error, if
// any. A resume copies the old rows the run did not reach (it was
// interrupted, or hit --max-duration) and puts the new file in place; after
// a write error before that, the old file is left as it was. The lock is
// released in every case.
func (o *Output) Close(runErr error) error {
	if o.closed {
		return nil
	}
	o.closed = true
	defer o.release()
	if !o.resuming || o.committed {
		return o.closeDst()
	}
	if runErr != nil {
		o.abort()
		return nil
	}
	if err := o.finish(); err != nil {
		o.abort()
		return err
	}
	return nil
}

// finish appends the old rows from the first one the run did not reach,
// then commits.
func (o *Output) finish() error {
	var batch []results.Row
	flush := func() error {
		err := o.w.Write(batch)
		o.written += int64(len(batch))
		batch = batch[:0]
		return err
	}
	for o.consumed < o.oldRows {
		row, err := o.stream.Next()
		if err != nil {
			return fmt.Errorf("reading %s: %w", o.path, err)
		}
		o.consumed++
		if batch = append(batch, row); len(batch) >= 1024 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	return o.commit(false)
}

func (o *Output) closeDst() error {
	f := o.dst.f
	if f == nil {
		return nil
	}
	o.dst.f = nil
	serr := syncFile(f)
	if err := f.Close(); err != nil {
		return err
	}
	return serr
}

// closeOld closes the old output (nil-safe).
func (o *Output) closeOld() {
	if o.stream != nil {
		o.stream.Close()
		o.stream = nil
	}
	if o.old != nil {
		o.old.Close()
		o.old = nil
	}
}

// release closes what is still open and ends the lock.
func (o *Output) release() {
	o.closeOld()
	if o.dst.f != nil {
		o.dst.f.Close()
		o.dst.f = nil
	}
	o.lock.release()
	o.lock = nil
}
