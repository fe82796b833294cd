package report

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/hfsent/hfsent/internal/results"
)

// MaxMs bounds every time in a results file: a year, in milliseconds (a
// classify run's --max-duration is at most that too). A larger value is
// damage, not a run: drawn, it would squeeze every other bar to nothing,
// and near the int64 limit the time axis could never be built.
const MaxMs = 365 * 24 * 3600 * 1000

// requiredColumns are the columns the picture cannot do without. The
// others (status, label, error, text, ...) are not read, so the formula
// guard classify puts on label, error and text (a leading ') never reaches
// the picture; request_id is written as it was read.
var requiredColumns = []string{"request_id", "outcome", "latency_ms", "queued_ms", "started_ms", "finished_ms"}

// Adder takes the rows ReadCSV reads: a Collector, or one that also
// counts them against gold labels.
type Adder interface{ Add(Record) }

// LineError is a problem with one line of the results file.
type LineError struct {
	Line int // 1-based, as an editor counts; a quoted field may span lines
	Msg  string
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Msg) }

// ReadCSV adds every row of a results CSV to c. Times must lie within 0 ..
// MaxMs, and queued <= started <= finished; a row that breaks either is an
// error naming its line, since the picture of a damaged file would mislead.
//
// It reads with encoding/csv directly rather than through gocsv: a record
// at a time, so that an error names the line of the file the record starts
// on (gocsv counts records, which is not the line once a text spans lines).
func ReadCSV(r io.Reader, c Adder) error {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return errors.New("empty file: no header line")
	}
	if err != nil {
		return csvError(err)
	}
	col := map[string]int{}
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff")
		}
		if _, dup := col[strings.TrimSpace(h)]; !dup {
			col[strings.TrimSpace(h)] = i
		}
	}
	var missing []string
	for _, name := range requiredColumns {
		if _, ok := col[name]; !ok {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not an hfsent results file: no column %s", strings.Join(missing, ", "))
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return csvError(err)
		}
		line, _ := cr.FieldPos(0)
		row, msg := record(rec, col)
		if msg != "" {
			return &LineError{Line: line, Msg: msg}
		}
		c.Add(row)
	}
}

// record turns one CSV record into a Record, or says what is wrong with it.
func record(rec []string, col map[string]int) (Record, string) {
	field := func(name string) string { return strings.TrimSpace(rec[col[name]]) }
	// ms reads a time column; an empty optional one reads as absent.
	ms := func(name string, optional bool) (int64, bool, string) {
		s := field(name)
		if s == "" {
			if optional {
				return 0, false, ""
			}
			return 0, false, name + " is empty"
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, false, fmt.Sprintf("%s %.40q is not a whole number of milliseconds", name, s)
		}
		if v < 0 || v > MaxMs {
			return 0, false, fmt.Sprintf("%s %d is out of range (0 to %d ms, a year)", name, v, int64(MaxMs))
		}
		return v, true, ""
	}
	r := Record{RequestID: rec[col["request_id"]], Outcome: field("outcome"), Score: math.NaN()}
	if i, ok := col["label"]; ok {
		r.Label = results.Unguard(rec[i])
	}
	if i, ok := col["score"]; ok && strings.TrimSpace(rec[i]) != "" {
		f, err := strconv.ParseFloat(strings.TrimSpace(rec[i]), 64)
		if err != nil || f < 0 || f > 1 {
			return r, fmt.Sprintf("score %.40q is not a number between 0 and 1", rec[i])
		}
		r.Score = f
	}
	var msg string
	if r.QueuedMs, _, msg = ms("queued_ms", false); msg != "" {
		return r, msg
	}
	if r.FinishedMs, _, msg = ms("finished_ms", false); msg != "" {
		return r, msg
	}
	if r.StartedMs, r.Sent, msg = ms("started_ms", true); msg != "" {
		return r, msg
	}
	switch {
	case r.Sent && r.StartedMs < r.QueuedMs:
		return r, fmt.Sprintf("started_ms %d is before queued_ms %d", r.StartedMs, r.QueuedMs)
	case r.Sent && r.FinishedMs < r.StartedMs:
		return r, fmt.Sprintf("finished_ms %d is before started_ms %d", r.FinishedMs, r.StartedMs)
	case r.FinishedMs < r.QueuedMs:
		return r, fmt.Sprintf("finished_ms %d is before queued_ms %d", r.FinishedMs, r.QueuedMs)
	}
	if r.Sent {
		lat, ok, msg := ms("latency_ms", true)
		if msg != "" {
			return r, msg
		}
		if !ok {
			lat = r.FinishedMs - r.StartedMs
		}
		r.LatencyMs = lat
	}
	return r, ""
}

// csvError names the line of a CSV syntax error.
func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &LineError{Line: pe.Line, Msg: pe.Err.Error()}
	}
	return err
}
