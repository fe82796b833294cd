//go:build unix

package cli

import (
	"os"

	"golang.org/x/sys/unix"
)

// stdoutClosed reports whether the process started with descriptor 1
// closed (`hfsent ... >&-`): Go's runtime then opens /dev/null there,
// read-write, before main runs, so writes succeed and go nowhere. A shell's
// `>/dev/null` opens it write-only, so it is not mistaken for this.
func stdoutClosed() bool {
	var st, null unix.Stat_t
	if unix.Fstat(1, &st) != nil || unix.Stat(os.DevNull, &null) != nil {
		return false
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != null.Rdev {
		return false
	}
	fl, err := unix.FcntlInt(1, unix.F_GETFL, 0)
	return err == nil && fl&unix.O_ACCMODE == unix.O_RDWR
}
