package cli

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/results"
)

// The results CSV stays a plain CSV; what --resume needs to know about the
// run that wrote it lives beside it in OUTPUT.hfsent.json.
const sidecarSuffix = ".hfsent.json"

// A resume writes a new file here, then renames it over the output once it
// holds at least every row the old file held: until then the old file is
// untouched, so a crash during a resume never loses a kept row.
const resumeTempSuffix = ".hfsent-resume.tmp"

type sidecar struct {
	Version     int    `json:"version"`
	Input       string `json:"input"`
	InputSize   int64  `json:"input_size"`
	InputSHA256 string `json:"input_sha256,omitempty"`
	Provider    string `json:"provider"`
	Model       string `json:"model"`
	IDColumn    string `json:"id_column"`
	TextColumn  string `json:"text_column"`
	// How the input was read; "" in a sidecar written before they were
	// recorded, when it was always a comma and UTF-8.
	Delimiter string `json:"delimiter,omitempty"`
	Encoding  string `json:"encoding,omitempty"`
}

// identity describes this run's input, how it is read, and the model. Only
// a regular file can be fingerprinted (in the pass that checks it parses:
// in.digest); stdin or a pipe gives an identity that no resume will accept.
func identity(o *classifyOptions, in inputInfo, src *input.Reader) sidecar {
	d, _ := src.Delimiter()
	sc := sidecar{Version: 1, Input: in.name, Provider: o.prov.provider, Model: o.prov.model,
		IDColumn: o.in.idColumn, TextColumn: o.in.textColumn,
		Delimiter: input.DelimiterName(d), Encoding: strings.TrimSuffix(src.Encoding(), " (BOM)"),
		InputSize: in.size, InputSHA256: in.digest}
	if o.prov.provider == "local" {
		sc.Model = provider.LocalModel
	}
	return sc
}

// mismatch says how prev (the sidecar of the existing output) differs from
// this run, or "" when the output may be resumed.
func (cur sidecar) mismatch(prev sidecar) string {
	switch {
	case cur.InputSHA256 == "":
		return fmt.Sprintf("this run's input %s is not a regular file, so it cannot be checked against the earlier run", cur.Input)
	case prev.InputSHA256 == "":
		return fmt.Sprintf("it was written from %s, which cannot be checked", prev.Input)
	case prev.InputSHA256 != cur.InputSHA256 || prev.InputSize != cur.InputSize:
		return fmt.Sprintf("it was written from a different input (%s, %d bytes, sha256 %.12s…)", prev.Input, prev.InputSize, prev.InputSHA256)
	case prev.Provider != cur.Provider || prev.Model != cur.Model:
		return fmt.Sprintf("it was written by --provider %s --model %s, not --provider %s --model %s", prev.Provider, prev.Model, cur.Provider, cur.Model)
	case prev.IDColumn != cur.IDColumn || prev.TextColumn != cur.TextColumn:
		return fmt.Sprintf("it was written with --id-column %q --text-column %q", prev.IDColumn, prev.TextColumn)
	case cmp.Or(prev.Delimiter, ",") != cmp.Or(cur.Delimiter, ",") || cmp.Or(prev.Encoding, "utf-8") != cmp.Or(cur.Encoding, "utf-8"):
		return fmt.Sprintf("it was written reading the input with delimiter %s and encoding %s, this run reads it with %s and %s (see --delimiter, --encoding)",
			cmp.Or(prev.Delimiter, ","), cmp.Or(prev.Encoding, "utf-8"), cmp.Or(cur.Delimiter, ","), cmp.Or(cur.Encoding, "utf-8"))
	}
	return ""
}

func writeSidecar(output string, sc sidecar) error {
	b, err := json.MarshalIndent(sc, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(output+sidecarSuffix, append(b, '\n'))
}

func readSidecar(output string) (sidecar, error) {
	var sc sidecar
	b, err := os.ReadFile(output + sidecarSuffix)
	if err != nil {
		return sc, err
	}
	return sc, json.Unmarshal(b, &sc)
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// output is where a classify run writes: stdout, a new file, or a resumed
// one.
type output struct {
	src  engine.Source
	sink engine.Sink
	w    *results.Writer
	// close ends the output after the run: for a resume it copies the old
	// rows the run did not reach and puts the new file in place.
	close func(runErr error) error
}

// openOutput prepares the output. src reads the input; for a resume it is
// wrapped so that rows already final in the old file are passed on as they
// are.
func openOutput(o *classifyOptions, ios *IOStreams, log *slog.Logger, src *input.Reader, in inputInfo) (*output, error) {
	if o.output == "" || o.output == "-" {
		w, err := results.NewWriter(ios.Out, o.includeText)
		if err != nil {
			return nil, usageErrorf("cannot write stdout: %v", err)
		}
		return &output{src: src, sink: w, w: w, close: func(error) error { return nil }}, nil
	}
	if o.input != "-" && sameFile(o.input, o.output) {
		return nil, usageErrorf("--output %s is the input file; choose another path", o.output)
	}
	id := identity(o, in, src)
	if o.resume {
		st, err := os.Stat(o.output)
		switch {
		case err == nil && st.Size() > 0:
			return openResume(o, log, src, id)
		case err == nil || errors.Is(err, os.ErrNotExist):
			log.Info("--resume: no earlier results in " + o.output + "; starting from the first row")
		default:
			return nil, usageErrorf("cannot read output %s: %v", o.output, unwrapPathError(err))
		}
	}
	f, closeOut, err := createOutput(o, ios)
	if err != nil {
		return nil, err
	}
	w, err := results.NewWriter(f, o.includeText)
	if err != nil {
		closeOut()
		return nil, usageErrorf("cannot write %s: %v", o.output, err)
	}
	// Written after the output is truncated: a crash in between leaves an
	// empty output, never old rows under a new identity.
	if err := writeSidecar(o.output, id); err != nil {
		closeOut()
		return nil, usageErrorf("cannot write %s: %v", o.output+sidecarSuffix, unwrapPathError(err))
	}
	return &output{src: src, sink: w, w: w, close: func(error) error { return closeOut() }}, nil
}

// openResume checks that the existing output belongs to this input and
// model, reads it once through to check it lines up with the input row by
// row (so a mismatch is refused before any call), and sets up the merge.
func openResume(o *classifyOptions, log *slog.Logger, src *input.Reader, id sidecar) (*output, error) {
	prev, err := readSidecar(o.output)
	if err != nil {
		return nil, usageErrorf("--resume: cannot tell which input and model %s belongs to (%s: %v); run without --resume to start over",
			o.output, o.output+sidecarSuffix, unwrapPathError(err))
	}
	if why := id.mismatch(prev); why != "" {
		return nil, usageErrorf("--resume: %s does not belong to this run: %s; run without --resume to start over, or choose another --output", o.output, why)
	}
	if err := recoverResume(o, log); err != nil {
		return nil, err
	}
	old, err := os.Open(o.output)
	if err != nil {
		return nil, usageErrorf("cannot read output %s: %v", o.output, unwrapPathError(err))
	}
	plan, err := checkResume(o, old)
	if err != nil {
		old.Close()
		return nil, err
	}
	stream, err := openStream(old, o.includeText)
	if err != nil {
		old.Close()
		return nil, usageErrorf("--resume: %s: %v", o.output, err)
	}
	msg := fmt.Sprintf("--resume: %d rows kept from %s; %d earlier rows to redo, then the rows it had not reached", plan.kept, o.output, plan.rows-plan.kept)
	if plan.torn {
		msg += "; a torn last line was dropped"
	}
	log.Info(msg)

	tmpPath := o.output + resumeTempSuffix
	tmp, err := os.OpenFile(tmpPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		stream.Close()
		old.Close()
		return nil, usageErrorf("cannot create %s: %v", tmpPath, unwrapPathError(err))
	}
	w, err := results.NewWriter(tmp, o.includeText)
	if err != nil {
		stream.Close()
		old.Close()
		tmp.Close()
		return nil, usageErrorf("cannot write %s: %v", tmpPath, err)
	}
	r := &resumer{out: o.output, tmpPath: tmpPath, tmp: tmp, old: old, stream: stream, w: w, oldRows: plan.rows}
	if plan.rows == 0 {
		if err := r.commit(); err != nil {
			r.abort()
			return nil, usageErrorf("cannot replace %s: %v", o.output, err)
		}
	}
	return &output{src: &resumeSource{in: src, r: r}, sink: r, w: w, close: r.close}, nil
}

// recoverResume folds in what an earlier resume left behind when it was
// killed before its new file caught up with the old one: that file holds the
// first P rows of the merged result (rows are written in input order), the
// old output the rows from P on. Put together they are the most finished
// state, so the rows that resume redid are not redone again. The merge goes
// to a third file and is renamed into place, so a crash here loses nothing
// either, and running it twice gives the same file.
func recoverResume(o *classifyOptions, log *slog.Logger) error {
	tmpPath := o.output + resumeTempSuffix
	tmp, err := os.Open(tmpPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return usageErrorf("cannot read %s: %v", tmpPath, unwrapPathError(err))
	}
	defer tmp.Close()
	newer, err := openStream(tmp, o.includeText)
	if err != nil {
		log.Warn("--resume: ignoring "+tmpPath+", left by an earlier resume: it is not a results file of this run", "err", err)
		_ = os.Remove(tmpPath)
		return nil
	}
	defer newer.Close()
	oldf, err := os.Open(o.output)
	if err != nil {
		return usageErrorf("cannot read output %s: %v", o.output, unwrapPathError(err))
	}
	defer oldf.Close()
	older, err := openStream(oldf, o.includeText)
	if err != nil {
		return usageErrorf("--resume: %s: %v; run without --resume to start over", o.output, err)
	}
	defer older.Close()

	mergedPath := o.output + ".hfsent-recover.tmp"
	f, err := os.OpenFile(mergedPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return usageErrorf("cannot create %s: %v", mergedPath, unwrapPathError(err))
	}
	fail := func(err error) error {
		f.Close()
		os.Remove(mergedPath)
		return usageErrorf("--resume: recovering %s: %v", tmpPath, err)
	}
	w, err := results.NewWriter(f, o.includeText)
	if err != nil {
		return fail(err)
	}
	var batch []results.Row
	flush := func() error {
		err := w.Write(batch)
		batch = batch[:0]
		return err
	}
	var fromNewer int64
	// A damaged tail of the newer file ends its part: the old file still
	// holds those rows.
	for row, err := newer.Next(); err == nil; row, err = newer.Next() {
		if batch = append(batch, row); len(batch) >= 1024 {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
		fromNewer++
	}
	var skipped int64
	for {
		row, err := older.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("reading %s: %w", o.output, err))
		}
		if skipped < fromNewer {
			skipped++
			continue
		}
		if batch = append(batch, row); len(batch) >= 1024 {
			if err := flush(); err != nil {
				return fail(err)
			}
		}
	}
	if err := flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(mergedPath, o.output); err != nil {
		return fail(err)
	}
	syncDir(filepath.Dir(o.output))
	_ = os.Remove(tmpPath)
	log.Info(fmt.Sprintf("--resume: an earlier resume of %s was cut short; its %d finished rows are kept", o.output, fromNewer))
	return nil
}

type resumePlan struct {
	rows, kept int64
	torn       bool
}

// checkResume reads the old output alongside the input: row k of the output
// must carry the id of input row k (the output is always a prefix of the
// input, in order).
func checkResume(o *classifyOptions, old *os.File) (resumePlan, error) {
	var plan resumePlan
	stream, err := openStream(old, o.includeText)
	if err != nil {
		return plan, usageErrorf("--resume: %s: %v; run without --resume to start over", o.output, err)
	}
	defer stream.Close()
	f, err := os.Open(o.input)
	if err != nil {
		return plan, usageErrorf("cannot open input %s: %v", o.input, unwrapPathError(err))
	}
	defer f.Close()
	in, err := input.NewReader(f, o.in.readerOptions(o.input))
	if err != nil {
		return plan, usageError(err)
	}
	for {
		prev, err := stream.Next()
		if errors.Is(err, io.EOF) {
			plan.torn = stream.Torn()
			return plan, nil
		}
		if err != nil {
			return plan, usageErrorf("--resume: %s: %v; run without --resume to start over", o.output, err)
		}
		row, err := in.Next()
		if err != nil {
			return plan, usageErrorf("--resume: %s has more rows than the input %s; run without --resume to start over", o.output, o.input)
		}
		if !sameID(prev.RequestID, row.ID) {
			return plan, usageErrorf("--resume: row %d of %s has request_id %q but the input's row %d has %q: the output belongs to another input",
				plan.rows+1, o.output, prev.RequestID, plan.rows+1, row.ID)
		}
		plan.rows++
		if prev.Outcome.Final() {
			plan.kept++
		}
	}
}

// sameID matches an id in the results with the input's: results carry the id
// exactly as read, but files written before that carry it trimmed, and
// surrounding spaces never make a different id.
func sameID(result, in string) bool {
	return strings.TrimSpace(result) == strings.TrimSpace(in)
}

func openStream(f *os.File, includeText bool) (*results.Stream, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return results.NewStream(f, st.Size(), includeText)
}

// resumer merges the old output with the run's new rows into a new file.
type resumer struct {
	out, tmpPath string
	tmp, old     *os.File
	stream       *results.Stream
	w            *results.Writer

	oldRows  int64 // complete rows in the old file
	consumed int64 // old rows matched with input rows so far (the reader's)
	written  int64 // rows written to the new file (the writer's)
	done     bool  // the new file has replaced the old
}

// Write implements engine.Sink: once the new file holds as many rows as the
// old one, it has everything the old one had, and replaces it.
func (r *resumer) Write(rows []results.Row) error {
	if err := r.w.Write(rows); err != nil {
		return err
	}
	r.written += int64(len(rows))
	if !r.done && r.written >= r.oldRows {
		return r.commit()
	}
	return nil
}

func (r *resumer) commit() error {
	if err := r.tmp.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	if err := os.Rename(r.tmpPath, r.out); err != nil {
		return err
	}
	syncDir(filepath.Dir(r.out))
	r.done = true
	return nil
}

// close copies the old rows the run did not reach (it was interrupted or
// hit --max-duration), then puts the new file in place. After a failed
// write the old file is left as it was.
func (r *resumer) close(runErr error) error {
	defer r.old.Close()
	defer r.stream.Close()
	if runErr != nil && !r.done {
		r.abort()
		return nil
	}
	if !r.done {
		for r.consumed < r.oldRows {
			row, err := r.stream.Next()
			if err != nil {
				r.abort()
				return fmt.Errorf("reading %s: %w", r.out, err)
			}
			r.consumed++
			if err := r.Write([]results.Row{row}); err != nil {
				r.abort()
				return err
			}
		}
		if !r.done {
			if err := r.commit(); err != nil {
				r.abort()
				return err
			}
		}
	}
	serr := r.tmp.Sync()
	if err := r.tmp.Close(); err != nil {
		return err
	}
	if serr != nil && !errors.Is(serr, os.ErrInvalid) {
		return serr
	}
	return nil
}

func (r *resumer) abort() {
	r.tmp.Close()
	if !r.done {
		os.Remove(r.tmpPath)
	}
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// resumeSource pairs each input row with the old output's row at the same
// position; a final one is passed on to be written as it is.
type resumeSource struct {
	in *input.Reader
	r  *resumer
}

func (s *resumeSource) Next() (input.Row, error) {
	row, _, err := s.NextPrior()
	return row, err
}

func (s *resumeSource) NextPrior() (input.Row, *results.Row, error) {
	row, err := s.in.Next()
	if err != nil || s.r.consumed >= s.r.oldRows {
		return row, nil, err
	}
	prev, err := s.r.stream.Next()
	if err != nil {
		return row, nil, &input.Error{Name: s.r.out, Msg: "cannot read the earlier results: " + err.Error()}
	}
	s.r.consumed++
	if !sameID(prev.RequestID, row.ID) {
		return row, nil, &input.Error{Name: s.r.out, Msg: fmt.Sprintf("row %d does not match the input", s.r.consumed)}
	}
	if !prev.Outcome.Final() {
		return row, nil, nil
	}
	return row, &prev, nil
}
