package resume

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/results"
)

// recover folds in what an earlier resume left behind when it was killed
// before its temp file caught up with the old output: the temp file holds
// the first P rows of the merged result (rows are written in input order),
// the old output the rows from P on. Put together they are the most
// finished state, so the rows that resume redid are not redone again.
//
// The temp file is used only when it is this run's: its identity file
// names this run's input, model and columns, and its rows carry the ids of
// the input's first rows, in order. Anything else (a temp file without its
// identity, from another input or model, damaged) is removed with a
// warning and the old output is resumed as it is.
//
// The merge goes to a third file renamed into place, so a crash here loses
// nothing either, and running it twice gives the same file.
func (o *Output) recover(opts Options) error {
	tmpPath, idPath := o.path+TempSuffix, o.path+TempIdentitySuffix
	tmp, err := o.fs.OpenFile(tmpPath, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		_ = removeIfThere(o.fs, idPath) // an identity whose temp file was never created
		return nil
	}
	if err != nil {
		return fmt.Errorf("cannot read %s: %v", tmpPath, unwrap(err))
	}
	defer tmp.Close()
	discard := func(why string) error {
		o.log.Warn("--resume: ignoring " + tmpPath + ", left by an earlier resume: " + why)
		tmp.Close()
		_ = removeIfThere(o.fs, tmpPath)
		_ = removeIfThere(o.fs, idPath)
		return nil
	}
	id, err := readIdentity(idPath)
	if err != nil {
		return discard("nothing says which run wrote it")
	}
	if why := opts.Identity.mismatch(id); why != "" {
		return discard(why)
	}
	newer, err := openStream(tmp, opts.IncludeText)
	if err != nil {
		return discard("it is not a results file of this run (" + err.Error() + ")")
	}
	defer newer.Close()
	oldf, err := o.fs.OpenFile(o.path, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("cannot read output %s: %v", o.path, unwrap(err))
	}
	defer oldf.Close()
	older, err := openStream(oldf, opts.IncludeText)
	if err != nil {
		return fmt.Errorf("--resume: %s: %v; run without --resume to start over", o.path, err)
	}
	defer older.Close()
	in, closeIn, err := openInput(opts.Identity, opts.Read)
	if err != nil {
		return err
	}
	defer closeIn()

	mergedPath := o.path + recoverSuffix
	f, err := o.fs.OpenFile(mergedPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("cannot create %s: %v", mergedPath, unwrap(err))
	}
	closed := false
	drop := func() {
		if !closed {
			f.Close()
		}
		_ = removeIfThere(o.fs, mergedPath)
	}
	fail := func(err error) error {
		drop()
		return fmt.Errorf("--resume: recovering %s: %v", tmpPath, unwrap(err))
	}
	w, err := results.NewWriter(f, opts.IncludeText, results.Raw(opts.RawCSV), results.WithExtra(opts.Extra))
	if err != nil {
		return fail(err)
	}
	fromNewer, why, err := mergeRows(w, newer, older, in, o.path)
	switch {
	case why != "":
		drop()
		newer.Close()
		return discard(why)
	case err != nil:
		return fail(err)
	}
	err = closeSynced(f)
	closed = true
	if err != nil {
		return fail(err)
	}
	// Closed before the rename: Windows cannot rename over an open file,
	// so the old output's readers go first too.
	older.Close()
	oldf.Close()
	if err := o.fs.Rename(mergedPath, o.path); err != nil {
		return fail(err)
	}
	syncDir(filepath.Dir(o.path))
	newer.Close()
	tmp.Close()
	_ = removeIfThere(o.fs, tmpPath)
	_ = removeIfThere(o.fs, idPath)
	o.log.Info(fmt.Sprintf("--resume: an earlier resume of %s was cut short; its %d finished rows are kept", o.path, fromNewer))
	return nil
}

// mergeRows writes to w the newer file's rows, then the older file's from
// the row where the newer ones end, in batches. A newer row that is not
// the input's row at its place makes the newer file another run's: why says
// so, and nothing of the merge is to be kept. A damaged tail of the newer
// file ends its part: the old file still holds those rows.
func mergeRows(w *results.Writer, newer, older *results.Stream, in *input.Reader, oldPath string) (fromNewer int64, why string, err error) {
	batch := make([]results.Row, 0, 1024)
	add := func(row results.Row) error {
		if batch = append(batch, row); len(batch) < cap(batch) {
			return nil
		}
		err := w.Write(batch)
		batch = batch[:0]
		return err
	}
	for row, err := newer.Next(); err == nil; row, err = newer.Next() {
		want, err := in.Next()
		if err != nil || !sameID(row.RequestID, want.ID) {
			return fromNewer, fmt.Sprintf("its row %d (request_id %q) is not the input's row %d", fromNewer+1, row.RequestID, fromNewer+1), nil
		}
		if err := add(row); err != nil {
			return fromNewer, "", err
		}
		fromNewer++
	}
	for skipped := int64(0); ; {
		row, err := older.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fromNewer, "", fmt.Errorf("reading %s: %w", oldPath, err)
		}
		if skipped < fromNewer {
			skipped++
			continue
		}
		if err := add(row); err != nil {
			return fromNewer, "", err
		}
	}
	return fromNewer, "", w.Write(batch)
}

// closeSynced syncs f to disk and closes it: the first error of the two.
func closeSynced(f file) error {
	serr := syncFile(f)
	if cerr := f.Close(); serr == nil {
		return cerr
	}
	return serr
}
