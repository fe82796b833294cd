package results

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync/atomic"

	"github.com/gocarina/gocsv"

	"github.com/hfsent/hfsent/internal/outcome"
)

// record is a results row as gocsv decodes it. Fields that are empty for a
// row never sent (or with no label) are pointers.
type record struct {
	RequestID  string   `csv:"request_id"`
	Label      string   `csv:"label"`
	Score      *float64 `csv:"score,omitempty"`
	Outcome    string   `csv:"outcome"`
	Model      string   `csv:"model"`
	Attempts   int      `csv:"attempts"`
	LatencyMs  *int64   `csv:"latency_ms,omitempty"`
	Error      string   `csv:"error"`
	QueuedMs   int64    `csv:"queued_ms"`
	StartedMs  *int64   `csv:"started_ms,omitempty"`
	FinishedMs int64    `csv:"finished_ms"`
	Text       string   `csv:"text"`
	// Absent from a file written before them: nil.
	PromptTokens     *int     `csv:"prompt_tokens,omitempty"`
	CompletionTokens *int     `csv:"completion_tokens,omitempty"`
	CostUSD          *float64 `csv:"cost_usd,omitempty"`
	Cached           string   `csv:"cached"`
	// Extra columns, absent unless their feature was on.
	RawScore           *float64 `csv:"raw_score,omitempty"`
	Review             string   `csv:"review"`
	Stage              *int     `csv:"stage,omitempty"`
	CachedPromptTokens *int     `csv:"cached_prompt_tokens,omitempty"`
	Scores             string   `csv:"scores"`
}

func (r record) row() Row {
	// The formula guard is undone, so a kept row is rewritten as it was
	// and a label "-1" (written '-1) reads as -1.
	row := Row{RequestID: r.RequestID, Label: Unguard(r.Label), Outcome: outcome.Code(r.Outcome), Model: r.Model,
		Attempts: r.Attempts, Error: Unguard(r.Error), QueuedMs: r.QueuedMs, StartedMs: -1, FinishedMs: r.FinishedMs, Text: Unguard(r.Text)}
	if r.Score != nil {
		row.Score = *r.Score
	} else if row.Label != "" {
		row.Score = math.NaN() // a label with no score (a chat answer without logprobs)
	}
	if r.PromptTokens != nil || r.CompletionTokens != nil {
		row.Tokens = true
		if r.PromptTokens != nil {
			row.PromptTokens = *r.PromptTokens
		}
		if r.CompletionTokens != nil {
			row.CompletionTokens = *r.CompletionTokens
		}
	}
	if r.CostUSD != nil {
		row.CostUSD, row.Costed = *r.CostUSD, true
	}
	row.Cached = r.Cached == "true"
	row.RawScore = math.NaN()
	if r.RawScore != nil {
		row.RawScore = *r.RawScore
	}
	row.Review = r.Review == "true"
	if r.Stage != nil {
		row.Stage = *r.Stage
	}
	if r.CachedPromptTokens != nil {
		row.CachedPromptTokens = *r.CachedPromptTokens
	}
	row.Scores = ParseScores(Unguard(r.Scores))
	if r.StartedMs != nil {
		row.StartedMs = *r.StartedMs
		if r.LatencyMs != nil {
			row.LatencyMs = *r.LatencyMs
		}
	}
	return row
}

// Stream reads an existing results file one row at a time (for --resume),
// in flat memory. A torn last record, which a kill -9 in the middle of a
// write leaves, is detected and dropped: a record counts only when it
// parses and the newline that ends it is in the file.
type Stream struct {
	src    *tornReader
	rows   chan record
	errc   chan error
	err    error
	peeked *Row
	n      int64
	extra  Extra
}

// ErrHeader is returned by NewStream when the file's header is not that of
// a results file with the expected columns.
var ErrHeader = errors.New("header is not the results header")

// NewStream starts reading r, a results file of size bytes whose columns
// must be Columns(includeText). A file with no complete header line is
// read as empty.
func NewStream(r io.ReaderAt, size int64, includeText bool) (*Stream, error) {
	endsNL := false
	if size > 0 {
		var b [1]byte
		if _, err := r.ReadAt(b[:], size-1); err != nil {
			return nil, err
		}
		endsNL = b[0] == '\n'
	}
	cr := csv.NewReader(io.NewSectionReader(r, 0, size))
	t := &tornReader{cr: cr, size: size, endsNL: endsNL}
	header, err := t.Read()
	s := &Stream{src: t, rows: make(chan record), errc: make(chan error, 1)}
	if errors.Is(err, io.EOF) {
		close(s.rows)
		s.errc <- nil
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	extra, ok := knownHeader(header, includeText)
	if !ok {
		if _, ok := knownHeader(header, !includeText); ok {
			return nil, fmt.Errorf("%w: it was written %s --include-text", ErrHeader, map[bool]string{true: "with", false: "without"}[!includeText])
		}
		return nil, ErrHeader
	}
	s.extra = extra
	t.header = header
	go func() {
		s.errc <- gocsv.UnmarshalDecoderToChan(gocsv.NewSimpleDecoderFromCSVReader(t), s.rows)
	}()
	return s, nil
}

// NewStreamAny is NewStream for a results file written with or without
// --include-text, whichever it was.
func NewStreamAny(r io.ReaderAt, size int64) (*Stream, error) {
	s, err := NewStream(r, size, false)
	if errors.Is(err, ErrHeader) {
		if t, terr := NewStream(r, size, true); terr == nil {
			return t, nil
		}
	}
	return s, err
}

// knownHeader reports whether header is one a results file may have (one
// of the readable headers, then extra columns after the latest), and which
// extra columns it has.
func knownHeader(header []string, includeText bool) (Extra, bool) {
	if slices.ContainsFunc(readable(includeText), func(h []string) bool { return slices.Equal(h, header) }) {
		return Extra{}, true
	}
	now := Columns(includeText)
	if len(header) <= len(now) || !slices.Equal(header[:len(now)], now) {
		return Extra{}, false
	}
	return extraOf(header[len(now):])
}

// Extra are the extra columns the file has.
func (s *Stream) Extra() Extra { return s.extra }

// Next returns the next complete row, or io.EOF after the last.
func (s *Stream) Next() (Row, error) {
	if s.peeked != nil {
		row := *s.peeked
		s.peeked = nil
		return row, nil
	}
	if s.err != nil {
		return Row{}, s.err
	}
	rec, ok := <-s.rows
	if !ok {
		s.err = <-s.errc
		if s.err == nil {
			s.err = io.EOF
		}
		return Row{}, s.err
	}
	row := rec.row()
	if !row.Outcome.Valid() {
		s.err = fmt.Errorf("row %d: unknown outcome %q", s.n+1, rec.Outcome)
		return Row{}, s.err
	}
	s.n++
	return row, nil
}

// More reports whether another row follows, without consuming it.
func (s *Stream) More() bool {
	if s.peeked != nil {
		return true
	}
	row, err := s.Next()
	if err != nil {
		return false
	}
	s.peeked = &row
	return true
}

// Torn reports whether a torn last record was dropped (known once Next has
// returned io.EOF).
func (s *Stream) Torn() bool { return s.src.torn.Load() }

// Close stops the reading goroutine.
func (s *Stream) Close() {
	s.src.stop.Store(true)
	for range s.rows {
	}
}

// tornReader is the csv reader gocsv decodes from: it replays the header
// and turns a torn last record into the end of the file.
type tornReader struct {
	cr     *csv.Reader
	size   int64
	endsNL bool
	header []string
	torn   atomic.Bool
	stop   atomic.Bool
}

func (t *tornReader) Read() ([]string, error) {
	if h := t.header; h != nil {
		t.header = nil
		return h, nil
	}
	if t.stop.Load() {
		return nil, io.EOF
	}
	rec, err := t.cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, io.EOF
	}
	if t.cr.InputOffset() >= t.size && (err != nil || !t.endsNL) {
		t.torn.Store(true)
		return nil, io.EOF
	}
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("line %d: %v", pe.StartLine, pe.Err)
		}
		return nil, err
	}
	return rec, nil
}

// ReadAll is required by gocsv.CSVReader; the stream never calls it.
func (t *tornReader) ReadAll() ([][]string, error) {
	var all [][]string
	for {
		rec, err := t.Read()
		if errors.Is(err, io.EOF) {
			return all, nil
		}
		if err != nil {
			return all, err
		}
		all = append(all, rec)
	}
}
