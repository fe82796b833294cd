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
	// OutClosed says that the process started with stdout closed: what is
	// written to Out is lost, so results are refused there.
	OutClosed bool
	Getenv    func(string) string
	// HardExit ends the process at once (a second Ctrl-C); tests replace it.
	HardExit func(code int)
}

// System returns the process's own streams.
func System() *IOStreams {
	return &IOStreams{
		In:        os.Stdin,
		Out:       os.Stdout,
		ErrOut:    os.Stderr,
		ErrTTY:    term.IsTerminal(int(os.Stderr.Fd())),
		OutClosed: stdoutClosed(),
		Getenv:    os.Getenv,
		HardExit:  os.Exit,
	}
}

func (s *IOStreams) getenv(k string) string {
	if s.Getenv == nil {
		return ""
	}
	return s.Getenv(k)
}

// checkOut refuses to write results to a stdout that was closed: they
// would be lost while the command claims success.
func (s *IOStreams) checkOut(what string) error {
	if !s.OutClosed {
		return nil
	}
	return usageErrorf("stdout is closed (hfsent was started with >&-): the %s would be lost; give -o FILE, or redirect stdout (to /dev/null to discard them)", what)
}
