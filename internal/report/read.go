package report

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gocarina/gocsv"
)

// csvRow is a results CSV row as gocsv reads it. started_ms and latency_ms
// are empty for rows never sent, hence the pointers (omitempty leaves them
// nil). Other columns (status, label, text, ...) are ignored.
type csvRow struct {
	RequestID  string `csv:"request_id"`
	Outcome    string `csv:"outcome"`
	LatencyMs  *int64 `csv:"latency_ms,omitempty"`
	QueuedMs   int64  `csv:"queued_ms"`
	StartedMs  *int64 `csv:"started_ms,omitempty"`
	FinishedMs int64  `csv:"finished_ms"`
}

// requiredColumns are the columns the picture cannot do without.
var requiredColumns = []string{"request_id", "outcome", "latency_ms", "queued_ms", "started_ms", "finished_ms"}

// headerCheck is a gocsv decoder that refuses a file without the results
// columns (gocsv would otherwise read zeros) and keeps the line number for
// error messages.
type headerCheck struct {
	r      *csv.Reader
	header bool
}

func (d *headerCheck) GetCSVRow() ([]string, error) {
	rec, err := d.r.Read()
	if err != nil {
		return nil, err
	}
	if !d.header {
		d.header = true
		if len(rec) > 0 {
			rec[0] = strings.TrimPrefix(rec[0], "\ufeff")
		}
		have := map[string]bool{}
		for _, c := range rec {
			have[strings.TrimSpace(c)] = true
		}
		var missing []string
		for _, c := range requiredColumns {
			if !have[c] {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			return nil, fmt.Errorf("not an hfsent results file: no column %s", strings.Join(missing, ", "))
		}
	}
	return rec, nil
}

func (d *headerCheck) GetCSVRows() ([][]string, error) {
	var all [][]string
	for {
		rec, err := d.GetCSVRow()
		if errors.Is(err, io.EOF) {
			return all, nil
		}
		if err != nil {
			return nil, err
		}
		all = append(all, rec)
	}
}

// ReadCSV adds every row of a results CSV to c.
func ReadCSV(r io.Reader, c *Collector) error {
	cr := csv.NewReader(r)
	cr.ReuseRecord = false
	dec := &headerCheck{r: cr}
	err := gocsv.UnmarshalDecoderToCallback(dec, func(row csvRow) {
		rec := Record{
			RequestID:  row.RequestID,
			Outcome:    strings.TrimSpace(row.Outcome),
			QueuedMs:   row.QueuedMs,
			FinishedMs: row.FinishedMs,
		}
		if row.StartedMs != nil {
			rec.Sent = true
			rec.StartedMs = *row.StartedMs
			if row.LatencyMs != nil {
				rec.LatencyMs = *row.LatencyMs
			} else {
				rec.LatencyMs = rec.FinishedMs - rec.StartedMs
			}
		}
		c.Add(rec)
	})
	switch {
	case errors.Is(err, io.EOF):
		return errors.New("empty file: no header line")
	case errors.Is(err, gocsv.ErrEmptyCSVFile):
		return errors.New("empty file: no header line")
	}
	return err
}
