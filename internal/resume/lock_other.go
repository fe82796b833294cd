//go:build !(darwin || dragonfly || freebsd || linux || netbsd || openbsd || solaris || windows)

package resume

import "os"

// No advisory lock on this system (none of the release targets): the lock
// file still names the run, but does not keep a second run out.
func tryLock(*os.File) (bool, error) { return true, nil }

func unlock(*os.File) {}

func releaseLock(f *os.File, path string) {
	f.Close()
	_ = os.Remove(path)
}
