// Package paths answers two questions about a file a run will write, before
// the run starts: would writing it overwrite another file the run reads or
// writes, and can it be written at all.
package paths

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Clash reports whether writing a would overwrite b (or b, a): both name
// the same file, compared with os.SameFile when both exist and otherwise by
// their absolute, cleaned forms with symlinks resolved as far as the path
// exists. A character device (/dev/null, a terminal) never clashes: what is
// written to it replaces nothing.
func Clash(a, b string) bool {
	sa, errA := os.Stat(a)
	sb, errB := os.Stat(b)
	if errA == nil && errB == nil {
		return os.SameFile(sa, sb) && sa.Mode()&fs.ModeCharDevice == 0
	}
	ra, rb := resolve(a), resolve(b)
	// The default file systems of macOS and Windows ignore case.
	if runtime.GOOS == "darwin" || runtime.GOOS == "windows" {
		return strings.EqualFold(ra, rb)
	}
	return ra == rb
}

// resolve makes p absolute and resolves the symlinks of its longest
// existing prefix.
func resolve(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		abs = filepath.Clean(p)
	}
	dir, rest := abs, ""
	for {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return abs
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// ErrIsDir is returned for a path that names a directory.
var ErrIsDir = errors.New("it is a directory")

// Writable checks that path can be written in place (as os.WriteFile
// does) without changing anything: an existing file is opened for writing
// without truncating it; a missing one is created and removed again. A
// device or a pipe is not opened (opening a pipe with no reader would wait
// for ever).
func Writable(path string) error {
	st, err := os.Stat(path)
	switch {
	case err == nil && st.IsDir():
		return ErrIsDir
	case err == nil && !st.Mode().IsRegular():
		return nil
	case err == nil:
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return unwrap(err)
		}
		return f.Close()
	case errors.Is(err, fs.ErrNotExist):
		// O_EXCL: if the file appeared meanwhile, it is not ours to remove.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return unwrap(err)
		}
		f.Close()
		return unwrap(os.Remove(path))
	default:
		return unwrap(err)
	}
}

// Replaceable checks that path can be replaced by a new file renamed over
// it (a write through a temporary file beside it): path is not a directory
// and a file can be created in its directory.
func Replaceable(path string) error {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return ErrIsDir
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".check-*")
	if err != nil {
		return unwrap(err)
	}
	f.Close()
	return unwrap(os.Remove(f.Name()))
}

// unwrap drops the path an *fs.PathError repeats: callers name the file
// and the flag themselves.
func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
