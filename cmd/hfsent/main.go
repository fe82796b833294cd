// Command hfsent classifies the text rows of a CSV file with a Hugging Face
// model. All of its behaviour lives in internal/cli.
package main

// The Markdown command reference in docs/ (a test fails when it is stale).
//go:generate go run . docs ../../docs

import (
	"os"

	"github.com/hfsent/hfsent/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], cli.System()))
}
