package resume

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// ErrLocked is matched (errors.Is) by the error Open returns when another
// process holds the output's lock.
var ErrLocked = errors.New("the output is locked by another run")

// LockedError says which process holds the lock.
type LockedError struct {
	Output string
	PID    int // 0 when the lock file does not say
}

func (e *LockedError) Error() string {
	who := "another hfsent run"
	if e.PID > 0 {
		who += fmt.Sprintf(" (pid %d)", e.PID)
	}
	return fmt.Sprintf("%s is writing %s: wait for it to end, or stop it, then run again (two runs writing one file would mix their rows; the lock is %s and ends with that process)",
		who, e.Output, e.Output+LockSuffix)
}

func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// outputLock is an exclusive advisory lock on a lock file beside the
// output (flock on Unix, LockFileEx on Windows). The operating system drops
// it when the holder ends, however it ends, so a kill -9 leaves no stale
// lock; the file left behind then is taken over by the next run. The file
// holds the holder's PID, for the message of a run that is refused.
type outputLock struct {
	f    *os.File
	path string
}

// lockOutput takes the lock of output, or says who holds it.
func lockOutput(output string) (*outputLock, error) {
	path := output + LockSuffix
	// A holder removes the file on release: a run that opened it just
	// before may then hold a lock on a file no one else will open. It
	// checks and tries again; a few tries are plenty.
	for range 8 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("cannot create output %s: cannot create its lock file %s: %v", output, path, unwrap(err))
		}
		got, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("cannot lock %s: %v", path, err)
		}
		if !got {
			pid := readPID(f)
			f.Close()
			return nil, &LockedError{Output: output, PID: pid}
		}
		if sameFile(f, path) {
			// The PID is a courtesy for the message; the lock holds
			// without it (on a full disk, say).
			if f.Truncate(0) == nil {
				_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			}
			return &outputLock{f: f, path: path}, nil
		}
		unlock(f)
		f.Close()
	}
	return nil, fmt.Errorf("cannot lock %s: it keeps being replaced", path)
}

func sameFile(f *os.File, path string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Stat(path)
	return err == nil && os.SameFile(a, b)
}

func readPID(f *os.File) int {
	b := make([]byte, 32)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:n])))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// release ends the lock and removes the lock file (nil-safe).
func (l *outputLock) release() {
	if l == nil || l.f == nil {
		return
	}
	releaseLock(l.f, l.path)
	l.f = nil
}
