package serve

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	"golang.org/x/text/encoding"
	"golang.org/x/text/transform"

	"github.com/hfsent/hfsent/internal/outcome"
)

// Request bodies are bounded twice: each by --max-body, and all of them
// together by --body-budget, the bytes that bodies being read, decoded and
// answered may hold at once. A request takes its share before a byte of
// its body is read, and a request that finds no room is answered at once
// (503 with Retry-After) without its body being read; so however many
// callers send however much, the bodies cost at most the budget.
//
// A body of n bytes is charged bodyCost(n) while it is read and decoded:
// encoding/json's decoder holds a whole value in a buffer that grows by
// doubling (up to 2n) while the strings decoded from it are allocated (up
// to n: a JSON string never decodes to more bytes than it holds, and
// invalid UTF-8, which would, is refused). Once decoded, the request
// keeps heldCost(n) until its answer is written: its texts, and the rows
// and answer built from them. /v1/classify is decoded item by item, so its
// buffer holds one item at a time, not the body.
const (
	// DefaultBodyBudget is --body-budget's default: with --max-body 1MiB,
	// 21 bodies of the largest size decoding at once, and about 60 held by
	// requests waiting for their answer.
	DefaultBodyBudget = 64 << 20
	// requestOverhead is what a request holds besides its body: the
	// decoded rows and jobs, the results, the JSON answer (256 items).
	requestOverhead = 64 << 10
)

func bodyCost(n int64) int64 { return 3*n + requestOverhead }
func heldCost(n int64) int64 { return n + requestOverhead }

// MinBodyBudget is the budget --max-body needs: one body of the largest
// size must fit, or it could never be read.
func MinBodyBudget(maxBody int64) int64 { return bodyCost(maxBody) }

// budget is --body-budget: a weighted semaphore of bytes.
type budget struct {
	sem   *semaphore.Weighted
	size  int64
	inUse atomic.Int64
}

func newBudget(size int64) *budget { return &budget{sem: semaphore.NewWeighted(size), size: size} }

func (b *budget) take(n int64) bool {
	if !b.sem.TryAcquire(n) {
		return false
	}
	b.inUse.Add(n)
	return true
}

func (b *budget) give(n int64) {
	if n > 0 {
		b.inUse.Add(-n)
		b.sem.Release(n)
	}
}

// body is a request body being read: within --max-body, checked to be
// UTF-8 as it comes (x/text's UTF8Validator, which holds back a character
// cut between two reads), its share of the budget held until done.
type body struct {
	r    io.Reader
	err  error // why the body stopped being read (not io.EOF)
	b    *budget
	held int64 // bytes of the budget held
	size int64 // bytes it may be: its Content-Length, else --max-body
}

// errNotUTF8 stops reading a body that is not UTF-8: encoding/json would
// quietly make U+FFFD of the bytes, and a text is never altered.
var errNotUTF8 = errors.New("not valid UTF-8")

// openBody checks the content type and the size, and takes the body's
// share of the budget. When it answers (415, 413, or 503 when the budget
// is full, in both cases without reading the body) it returns nil.
func (s *Server) openBody(x *exchange) *body {
	mt, _, err := mime.ParseMediaType(x.r.Header.Get("Content-Type"))
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		x.fail(http.StatusUnsupportedMediaType, CodeMediaType, "Content-Type must be application/json", "")
		return nil
	}
	size := x.r.ContentLength
	if size > s.cfg.MaxBody {
		s.tooLarge(x)
		return nil
	}
	if size < 0 {
		size = s.cfg.MaxBody // chunked: it may be as large as that
	}
	cost := bodyCost(size)
	if cost > s.budget.size {
		// Only when --body-budget was set below what --max-body needs.
		x.w.Header().Set("Connection", "close")
		x.fail(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("a body of %d bytes needs %s of --body-budget, which is %s: it can never be read; send less",
			size, ShowBytes(cost), ShowBytes(s.budget.size)), "")
		return nil
	}
	if !s.budget.take(cost) {
		// The connection is closed after the answer, so net/http does not
		// read the body to reuse it: nothing of it is read.
		s.m.budgetRejections.Inc()
		x.w.Header().Set("Connection", "close")
		x.w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(s.cooldown())))
		x.fail(http.StatusServiceUnavailable, string(outcome.LocalCapacity), fmt.Sprintf(
			"the server is reading as many request bodies as --body-budget (%s) allows; try again after Retry-After", ShowBytes(s.budget.size)), "")
		return nil
	}
	b := &body{b: s.budget, held: cost, size: size}
	b.r = transform.NewReader(reading{http.MaxBytesReader(x.w, x.r.Body, s.cfg.MaxBody), &b.err}, encoding.UTF8Validator)
	return b
}

// tooLarge answers 413; the connection is closed after it, so that
// net/http does not read the rest of the body to reuse it.
func (s *Server) tooLarge(x *exchange) {
	x.w.Header().Set("Connection", "close")
	x.fail(http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("body over %d bytes (--max-body)", s.cfg.MaxBody), "")
}

// decoded gives back what decoding needed beyond what the request keeps.
func (b *body) decoded() {
	if keep := heldCost(b.size); b.held > keep {
		b.b.give(b.held - keep)
		b.held = keep
	}
}

// done gives back the rest, once the answer is written.
func (b *body) done() {
	b.b.give(b.held)
	b.held = 0
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, encoding.ErrInvalidUTF8) {
		err = errNotUTF8
	}
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// reading records the error a read of the body itself failed with (the
// connection, --max-body), under the UTF-8 check.
type reading struct {
	r   io.Reader
	err *error
}

func (r reading) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF && *r.err == nil {
		*r.err = err
	}
	return n, err
}

// failed answers a body that could not be decoded: by why reading it
// stopped (413 over --max-body, 422 not UTF-8, 400 the connection broke),
// else by what is wrong with the JSON (422, naming the field).
func (s *Server) failed(x *exchange, b *body, field, msg string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(b.err, &mbe):
		s.tooLarge(x)
	case errors.Is(b.err, errNotUTF8):
		s.invalid(x, "body", "not valid UTF-8")
	case b.err != nil:
		x.fail(http.StatusBadRequest, CodeBadRequest, "the body could not be read", "")
	default:
		s.invalid(x, field, msg)
	}
}

// decodeStrict decodes one JSON object from r into v: unknown fields,
// wrong types and anything after the object are refused. It returns the
// field at fault and why, or "" for the message when the body is good.
func decodeStrict(r io.Reader, v any) (field, msg string) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describe(err)
	}
	return trailing(dec)
}

// trailing refuses anything after the JSON object.
func trailing(dec *json.Decoder) (field, msg string) {
	if _, err := dec.Token(); err != io.EOF {
		return "body", "unexpected data after the JSON object"
	}
	return "", ""
}

// item is one item of /v1/classify as decoded: its fields, or why it
// could not be (field, msg), answered in its place.
type item struct {
	textRequest
	field, msg string
}

// decodeItems reads {"items": [...]} one item at a time, as
// decodeStrict(r, &classifyRequest{}) would read it whole, with the same
// answers: the items (at most max of them kept: past it they are only
// counted, for the message), how many there were, and whether "items" was
// there (and not null); or the field at fault and why. As for the whole
// decode, a syntax error anywhere comes first, then the first error about
// a value (an unknown field, items of the wrong type), then anything after
// the object; an item's own error is answered in its place.
func decodeItems(r io.Reader, max int) (items []item, count int, found bool, field, msg string) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	started := false
	// Past the first token an end is too soon; a syntax error is reported
	// at the offset the whole decode reports.
	fail := func(err error) ([]item, int, bool, string, string) {
		var syn *json.SyntaxError
		if errors.As(err, &syn) {
			err = &json.SyntaxError{Offset: wholeOffset(dec, syn)}
		}
		if err == io.EOF && started {
			err = io.ErrUnexpectedEOF
		}
		f, m := describe(err)
		return nil, 0, false, f, m
	}
	var first [2]string // the first error about a value: field, message
	note := func(f, m string) {
		if first[1] == "" {
			first = [2]string{f, m}
		}
	}
	tok, err := nextToken(dec)
	if err != nil {
		return fail(err)
	}
	started = true
	switch v := tok.(type) {
	case json.Delim:
		if v != '{' {
			if err := skipOpen(dec); err != nil {
				return fail(err)
			}
			return nil, 0, false, "body", "want a JSON object, got array"
		}
	case nil:
		field, msg = trailing(dec)
		return nil, 0, false, field, msg
	default:
		return nil, 0, false, "body", "want a JSON object, got " + kind(v)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail(err)
		}
		// encoding/json matches a field's name without regard to case.
		if key, _ := tok.(string); !strings.EqualFold(key, "items") {
			note(limit(key, 64), "unknown field")
			if err := dec.Decode(new(json.RawMessage)); err != nil {
				return fail(err)
			}
			continue
		}
		items, count, found = nil, 0, false // a second "items" replaces the first
		tok, err = nextToken(dec)
		if err != nil {
			return fail(err)
		}
		switch v := tok.(type) {
		case nil:
			continue
		case json.Delim:
			if v != '[' {
				note("items", "want an array, got object")
				if err := skipOpen(dec); err != nil {
					return fail(err)
				}
				continue
			}
		default:
			note("items", "want an array, got "+kind(v))
			continue
		}
		found = true
		if items, count, err = readItems(dec, max); err != nil {
			return fail(err)
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return fail(err)
	}
	if first[1] != "" {
		return nil, 0, false, first[0], first[1]
	}
	field, msg = trailing(dec)
	return items, count, found, field, msg
}

// readItems reads the items of an array whose '[' was read, and its ']':
// at most max of them kept (past it they are only counted), an item's own
// error kept in its place; err is an error of the whole body.
func readItems(dec *json.Decoder, max int) (items []item, count int, err error) {
	for dec.More() {
		count++
		if count > max {
			if err := dec.Decode(new(json.RawMessage)); err != nil {
				return nil, 0, err
			}
			continue
		}
		var it item
		if err := dec.Decode(&it.textRequest); err != nil {
			if !isDecodeError(err) {
				return nil, 0, err
			}
			it.field, it.msg = describe(err)
		}
		items = append(items, it)
	}
	_, err = dec.Token() // ]
	return items, count, err
}

// tooBig stands for a number too large for a float64, which Token refuses
// (as a type error) after reading it.
type tooBig struct{}

// nextToken is dec.Token, but a number out of range is a token (tooBig).
func nextToken(dec *json.Decoder) (json.Token, error) {
	tok, err := dec.Token()
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		return tooBig{}, nil
	}
	return tok, err
}

// skipOpen reads past the array or object whose opening token was just
// read.
func skipOpen(dec *json.Decoder) error {
	for depth := 1; depth > 0; {
		tok, err := nextToken(dec)
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
	return nil
}

// wholeOffset is the offset decoding the whole body at once reports for
// e, a syntax error of the streaming decoder: one past the bad byte,
// counted from the body's start. A token out of place is reported at its
// own offset. A value whose scan failed stays the decoder's error (decoding
// again returns it) and is still buffered from its start, where it is
// scanned again alone to find the bad byte: the decoder's own count runs
// over every value it has scanned, not from this one's start.
func wholeOffset(dec *json.Decoder, e *json.SyntaxError) int64 {
	start := dec.InputOffset()
	if err := dec.Decode(new(json.RawMessage)); err != error(e) {
		return e.Offset + 1
	}
	rest, _ := io.ReadAll(dec.Buffered())
	var syn *json.SyntaxError
	if err := json.NewDecoder(bytes.NewReader(rest)).Decode(new(json.RawMessage)); errors.As(err, &syn) {
		return start + syn.Offset
	}
	return start + e.Offset
}

// isDecodeError: err is about a value (a wrong type, an unknown field),
// which leaves the decoder at the next item, not about the JSON itself or
// reading it.
func isDecodeError(err error) bool {
	var typ *json.UnmarshalTypeError
	return errors.As(err, &typ) || strings.HasPrefix(err.Error(), "json: unknown field ")
}

// kind is how encoding/json names the kind of a token's value.
func kind(v json.Token) string {
	switch v.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	}
	return "number" // float64, or tooBig
}

// ShowBytes is n as a flag shows it: 64MiB, 512KiB, 1000.
func ShowBytes(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}
