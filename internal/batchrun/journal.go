package batchrun

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// JournalSuffix names the journal kept beside the results file: every
// batch the run created, recorded as soon as it was created, so that a
// run interrupted, timed out or killed leaves batches the next --resume
// collects instead of paying for their rows again.
const JournalSuffix = ".hfsent-batches.jsonl"

var errBadRows = errors.New("row ranges out of order")

// record is one line of the journal. A batch line records a created
// batch: its id, its input file, the rows it holds. A replace line says a
// batch refused for the enqueued-token limit was created again from the
// same file under a new id; a cancel line that the user cancelled it
// (--batch-cancel), so that its missing rows are not sent again.
type record struct {
	Batch   string `json:"batch"`
	File    string `json:"file,omitempty"`
	Rows    *Rows  `json:"rows,omitempty"`
	N       int64  `json:"n,omitempty"`
	Replace string `json:"replace,omitempty"` // the batch id this one replaces
	Cancel  bool   `json:"cancel,omitempty"`
	// Pending is written before the batch of File is asked for: a run
	// killed before the batch's id came back leaves it, and --resume finds
	// the batch made from File (the provider's list) or creates it, so
	// that no row is submitted twice.
	Pending bool `json:"pending,omitempty"`
}

// journal appends records to the file beside the output, each made
// durable (fsync) before the run goes on.
type journal struct {
	path string
	f    *os.File
}

// readJournal reads every record of path; none when it does not exist. A
// last line cut short by a crash is ignored: it was never acted upon.
func readJournal(path string) ([]record, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 256<<20)
	line := 0
	var bad error
	for sc.Scan() {
		line++
		if bad != nil {
			return nil, bad // a bad line followed by more: not a cut-short last line
		}
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || (r.Batch == "" && !r.Pending) {
			bad = fmt.Errorf("%s line %d is not a batch record", path, line)
			continue
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}

// openJournal opens path to append to it.
func openJournal(path string) (*journal, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &journal{path: path, f: f}, nil
}

func (j *journal) add(r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := j.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("recording batch %s in %s: %w", r.Batch, j.path, err)
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("recording batch %s in %s: %w", r.Batch+r.File, j.path, err)
	}
	return nil
}

func (j *journal) close() error { return j.f.Close() }
