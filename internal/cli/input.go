package cli

import (
	"log/slog"
	"strings"

	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/input"
)

// inputOptions are the flags that say how to read an input CSV: its columns,
// delimiter and encoding. Every command that reads one registers them with
// addInputFlags, so they read files the same way.
type inputOptions struct {
	idColumn   string
	textColumn string
	delimiter  string
	encoding   string

	delim rune // --delimiter, parsed by validate; 0: sniff
	// goldColumn is --gold-column, which the commands that take it set:
	// a column that must be there too, read as the gold label.
	goldColumn string
}

func addInputFlags(fs *pflag.FlagSet, o *inputOptions) {
	fs.StringVar(&o.idColumn, "id-column", "request_id", "column holding the row id")
	fs.StringVar(&o.textColumn, "text-column", "text", "column holding the text")
	fs.StringVar(&o.delimiter, "delimiter", "", "field delimiter `C`: one character, or tab (default: sniffed from the header line among comma, semicolon, tab and pipe)")
	fs.StringVar(&o.encoding, "encoding", "", "character encoding `NAME` of INPUT, e.g. windows-1252, latin1, utf-16; bytes not valid in it refuse the file (default: UTF-8, or UTF-16 when INPUT starts with its byte-order mark)")
}

// validate checks the input flags before anything is opened.
func (o *inputOptions) validate() error {
	if strings.TrimSpace(o.idColumn) == "" || strings.TrimSpace(o.textColumn) == "" {
		return usageErrorf("--id-column and --text-column must not be empty")
	}
	d, err := input.ParseDelimiter(o.delimiter)
	if err != nil {
		return usageError(err)
	}
	o.delim = d
	if _, err := input.LookupEncoding(o.encoding); err != nil {
		return usageError(err)
	}
	return nil
}

// readerOptions are the options for reading the input named name (a path,
// or "stdin"), after validate; maxChars is --max-chars, to which longer
// fields are cut while they are read.
func (o *inputOptions) readerOptions(name string, maxChars int) input.Options {
	return input.Options{Name: name, IDColumn: o.idColumn, TextColumn: o.textColumn, Delimiter: o.delim, Encoding: o.encoding, MaxChars: maxChars, GoldColumn: o.goldColumn}
}

// logInput says at debug level how the input is read.
func logInput(log *slog.Logger, name string, rd *input.Reader) {
	d, sniffed := rd.Delimiter()
	log.Debug("reading input", "input", name, "delimiter", input.DelimiterName(d), "sniffed", sniffed, "encoding", rd.Encoding())
}
