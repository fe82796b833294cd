//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris

package resume

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

func tryLock(f *os.File) (bool, error) {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return false, nil
		default:
			return false, err
		}
	}
}

func unlock(f *os.File) { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN) }

// releaseLock removes the file while still holding the lock, so that no
// run can lock it between the removal and the close; a run that opened it
// before finds, once it holds the lock, that the path names another file
// (or none) and tries again.
func releaseLock(f *os.File, path string) {
	_ = os.Remove(path)
	f.Close()
}
