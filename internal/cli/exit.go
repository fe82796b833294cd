package cli

import (
	"errors"
	"fmt"
)

// Exit codes, as SPEC.md defines them. This file is the one place that turns
// errors into them.
const (
	ExitOK          = 0
	ExitRowsFailed  = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// exitError carries an exit code up to Main. A nil err means the message was
// already printed (or there is none).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a usage or input error found before any call: exit 2.
func usageErrorf(format string, a ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, a...)}
}

func usageError(err error) error { return &exitError{code: ExitUsage, err: err} }

// silentExit ends with code after the command has reported for itself.
func silentExit(code int) error {
	if code == ExitOK {
		return nil
	}
	return &exitError{code: code}
}

// exitCode maps what a command returned to the process exit code.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	// Anything else reaching here is a flag or argument error from cobra.
	return ExitUsage
}
