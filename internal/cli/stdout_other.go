//go:build !unix

package cli

// stdoutClosed: only Unix runtimes put /dev/null on a closed descriptor.
func stdoutClosed() bool { return false }
