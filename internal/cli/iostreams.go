package cli

import (
	"io"
	"os"

	"golang.org/x/term"
)

// IOStreams is everything a command touches outside itself, so that tests
// can drive commands without a terminal or a real environment.
type IOStreams struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// ErrTTY says whether ErrOut is a terminal (progress is shown only there).
	ErrTTY bool
	Getenv func(string) string
	// HardExit ends the process at once (a second Ctrl-C); tests replace it.
	HardExit func(code int)
}

// System returns the process's own streams.
func System() *IOStreams {
	return &IOStreams{
		In:       os.Stdin,
		Out:      os.Stdout,
		ErrOut:   os.Stderr,
		ErrTTY:   term.IsTerminal(int(os.Stderr.Fd())),
		Getenv:   os.Getenv,
		HardExit: os.Exit,
	}
}

func (s *IOStreams) getenv(k string) string {
	if s.Getenv == nil {
		return ""
	}
	return s.Getenv(k)
}
