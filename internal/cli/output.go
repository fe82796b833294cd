package cli

import (
	"log/slog"
	"strconv"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/paths"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/resume"
)

// output is where a classify run writes: stdout, or a file (new, or resumed:
// internal/resume).
type output struct {
	src  engine.Source
	sink engine.Sink
	w    interface{ Freeze() bool }
	// close ends the output after the run: for a resume it copies the old
	// rows the run did not reach and puts the new file in place.
	close func(runErr error) error
}

// openOutput prepares the output. src reads the input; for a resume it is
// wrapped so that rows already final in the old file are passed on as they
// are.
func openOutput(o *classifyOptions, ios *IOStreams, log *slog.Logger, src *input.Reader, in inputInfo) (*output, error) {
	if err := o.checkSideFiles(); err != nil {
		return nil, err
	}
	if o.output == "" || o.output == "-" {
		w, err := results.NewWriter(ios.Out, o.includeText, results.Raw(o.rawCSV), results.WithExtra(o.qual.extra(&o.prov)))
		if err != nil {
			return nil, usageErrorf("cannot write stdout: %v", err)
		}
		return &output{src: src, sink: w, w: w, close: func(error) error { return nil }}, nil
	}
	if o.input != "-" && paths.Clash(o.input, o.output) {
		return nil, usageErrorf("--output %s is the input file; choose another path", o.output)
	}
	out, err := resume.Open(resume.Options{
		Path:        o.output,
		Identity:    identity(o, in, src),
		Read:        o.in.readerOptions(o.input, o.maxChars),
		IncludeText: o.includeText,
		Extra:       o.qual.extra(&o.prov),
		RawCSV:      o.rawCSV,
		Resume:      o.resume,
		Logger:      log,
	})
	if err != nil {
		return nil, usageError(err)
	}
	return &output{src: out.Source(src), sink: out, w: out, close: out.Close}, nil
}

// identity describes this run's input, how it is read, and the model (a
// cascade's first stage's, and the cascade's settings). Only
// a regular file can be fingerprinted (in the pass that checks it parses:
// in.digest); stdin or a pipe gives an identity that no resume will accept.
func identity(o *classifyOptions, in inputInfo, src *input.Reader) resume.Identity {
	d, _ := src.Delimiter()
	first := o.prov.first()
	threshold := ""
	if first.MultiLabel {
		threshold = strconv.FormatFloat(first.LabelThreshold, 'g', -1, 64)
	}
	return resume.Identity{Input: in.name, Provider: first.Provider, Model: first.ModelName(),
		IDColumn: o.in.idColumn, TextColumn: o.in.textColumn,
		Delimiter: input.DelimiterName(d), Encoding: src.EncodingName(),
		InputSize: in.size, InputSHA256: in.digest,
		Labels: o.run.Labels, LabelMap: o.run.LabelMap, RequestSHA256: o.run.Request,
		Calibration: o.prov.answers[0].SHA, ReviewBelow: o.qual.reviewBelowText(), Cascade: o.prov.cascadeSHA(),
		MultiLabel: first.MultiLabel, LabelThreshold: threshold, TopK: first.TopK, LabelSet: first.LabelSetSHA256()}
}

// checkSideFiles refuses, before anything is written, a --summary-json or
// --report path that would overwrite the input, the results, a file kept
// beside them, or each other, or that cannot be written: they are written at
// the end of the run, too late to say so.
func (o *classifyOptions) checkSideFiles() error {
	type file struct{ what, path string }
	var taken []file
	if o.input != "-" {
		taken = append(taken, file{"the input", o.input})
	}
	if o.output != "" && o.output != "-" {
		taken = append(taken, file{"--output", o.output})
		for _, p := range resume.Beside(o.output) {
			taken = append(taken, file{"a file hfsent keeps beside --output", p})
		}
	}
	for _, f := range []file{{"--summary-json", o.summaryJSON}, {"--report", o.report}, {"--review-out", o.qual.reviewOut}} {
		if f.path == "" {
			continue
		}
		for _, t := range taken {
			if paths.Clash(f.path, t.path) {
				return usageErrorf("%s %s would overwrite %s (%s); choose another path", f.what, f.path, t.what, t.path)
			}
		}
		// --report is written through a temporary file renamed over it,
		// --summary-json in place.
		check := paths.Writable
		if f.what == "--report" {
			check = paths.Replaceable
		}
		if err := check(f.path); err != nil {
			return usageErrorf("%s %s cannot be written: %v; choose another path", f.what, f.path, err)
		}
		taken = append(taken, f)
	}
	return nil
}
