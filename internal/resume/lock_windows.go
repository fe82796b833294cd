//go:build windows

package resume

import (
	"errors"
	"os"

	"golang.org/x/sys/windows"
)

// Windows byte-range locks are mandatory: the lock is on one byte at 4 GiB,
// far past the PID at the start of the file, which a refused run reads.
func lockRange() *windows.Overlapped { return &windows.Overlapped{OffsetHigh: 1} }

func tryLock(f *os.File) (bool, error) {
	err := windows.LockFileEx(windows.Handle(f.Fd()),
		windows.LOCKFILE_EXCLUSIVE_LOCK|windows.LOCKFILE_FAIL_IMMEDIATELY, 0, 1, 0, lockRange())
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, windows.ERROR_LOCK_VIOLATION), errors.Is(err, windows.ERROR_IO_PENDING):
		return false, nil
	default:
		return false, err
	}
}

func unlock(f *os.File) { _ = windows.UnlockFileEx(windows.Handle(f.Fd()), 0, 1, 0, lockRange()) }

// releaseLock closes before removing: Windows does not remove an open file.
// If another run has opened it meanwhile, the removal fails and the file
// stays, which is right: that run is about to lock it.
func releaseLock(f *os.File, path string) {
	unlock(f)
	f.Close()
	_ = os.Remove(path)
}
