package input

import (
	"fmt"
	"io"
	"os"
)

// Watch reads f, a regular file of size bytes (when it was opened), from
// where it is, and fails with an *Error (which names no line: the Reader
// reading it adds the line it was at) as soon as it sees that the file
// changed: its size is no longer size (checked before every read), or it
// ends before size bytes, or goes on past them. The rows of the bytes read
// before are good; nothing read after the change is passed on.
func Watch(f *os.File, size int64, name string) io.Reader {
	return &watched{f: f, size: size, name: name}
}

type watched struct {
	f    *os.File
	size int64
	name string
	read int64
	err  error
}

func (w *watched) Read(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if st, err := w.f.Stat(); err == nil && st.Size() != w.size {
		return 0, w.changed(st.Size())
	}
	n, err := w.f.Read(p)
	w.read += int64(n)
	switch {
	case w.read > w.size:
		// Grown between the check and the read: this read is the change.
		return 0, w.changed(w.read)
	case err == io.EOF && w.read < w.size:
		return 0, w.changed(w.read)
	}
	return n, err
}

func (w *watched) changed(now int64) error {
	what := "was truncated"
	if now > w.size {
		what = "grew"
	}
	w.err = &Error{Name: w.name, Msg: fmt.Sprintf("%s while it was read (%d bytes when the run began, %d now): the input changed", what, w.size, now)}
	return w.err
}
