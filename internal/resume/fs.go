package resume

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// file is what the package needs of an open file.
type file interface {
	io.Writer
	io.ReaderAt
	Stat() (fs.FileInfo, error)
	Sync() error
	Close() error
}

// fileSystem is how the package creates, renames and removes the files it
// writes. Tests replace it to fail a write after some bytes (a full disk) or
// to refuse renaming an open file, as Windows does.
type fileSystem interface {
	OpenFile(name string, flag int, perm fs.FileMode) (file, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
}

type osFS struct{}

func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err // not a nil *os.File in a non-nil interface
	}
	return f, nil
}

func (osFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error             { return os.Remove(name) }

// removeIfThere removes name; that it was not there is no error.
func removeIfThere(fsys fileSystem, name string) error {
	if err := fsys.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// syncFile makes f durable; a file that cannot be synced (a pipe, a
// device) is not an error.
func syncFile(f file) error {
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// syncDir makes a rename in dir durable where the system allows it.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// unwrap drops the path an *fs.PathError repeats: messages name the file
// themselves.
func unwrap(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
