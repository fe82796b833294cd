package batchapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/hfsent/hfsent/internal/redact"
)

// DefaultMaxLine bounds a result line when ReadResults is given no bound:
// a chat completion for one row is a few KiB (logprobs included); the live
// client reads at most 4 MiB of an answer, and a line holds one answer and
// its envelope.
const DefaultMaxLine = 4<<20 + 64<<10

// MaxMessage bounds an error message as Result and BatchError keep it, in
// characters.
const MaxMessage = 200

// Result is one line of a batch's output or error file.
type Result struct {
	// CustomID is the line's custom_id, in the form CustomID makes (checked);
	// Index is the row index it names.
	CustomID string
	Index    int
	// ID is the provider's id for the request ("batch_req_..."), "" if none.
	ID string
	// StatusCode is response.status_code, 0 when the line has no response
	// (an error line: the request was never run).
	StatusCode int
	// RequestID is response.request_id, "" if none.
	RequestID string
	// Body is response.body as it was (raw JSON): the chat completion for a
	// 200, an OpenAI error object otherwise. Nil when there is no response.
	Body []byte
	// ErrCode and ErrMessage are the line's "error" (code, message) when it
	// has no response; for a response that is not 2xx, its body's
	// error.code and error.message. ErrMessage is summarised (one line, at
	// most MaxMessage characters, credentials redacted): never shown raw.
	ErrCode, ErrMessage string
}

// OK reports whether the line is an answer: a 2xx response.
func (r Result) OK() bool { return r.StatusCode >= 200 && r.StatusCode < 300 }

// LineError is ReadResults' error for a line it refuses.
type LineError struct {
	Line int    // 1-based
	Msg  string // what is wrong, without the line's content
	Err  error  // the cause, if any (ErrCustomID, bufio.ErrTooLong, fn's)
}

func (e *LineError) Error() string {
	s := fmt.Sprintf("result line %d: %s", e.Line, e.Msg)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *LineError) Unwrap() error { return e.Err }

// wireResult is a result line as OpenAI writes it. Fields are raw so that
// a wrong type is told apart from an absent field.
type wireResult struct {
	ID       json.RawMessage `json:"id"`
	CustomID json.RawMessage `json:"custom_id"`
	Response json.RawMessage `json:"response"`
	Error    json.RawMessage `json:"error"`
}

type wireResponse struct {
	StatusCode *int            `json:"status_code"`
	RequestID  *string         `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

type wireError struct {
	Code    json.RawMessage `json:"code"`
	Message json.RawMessage `json:"message"`
}

// ReadResults reads a batch's output or error file from r, line by line,
// and calls fn with each (line numbers from 1). It holds one line at a
// time: at most maxLine bytes (<= 0: DefaultMaxLine); a longer line is an
// error. Blank lines are skipped. A line that is not one JSON object, has
// no custom_id or one CustomID would not make, or has neither a response
// nor an error (or both), is an error naming the line number: nothing is
// guessed. An error from fn stops the reading and is returned, wrapped
// with the line number. Checking that a custom_id is one the run sent, and
// sent once, is the caller's: it alone knows.
func ReadResults(r io.Reader, maxLine int, fn func(line int, res Result) error) error {
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	sc := bufio.NewScanner(r)
	// One byte more than a line: the newline that ends it must fit too. A
	// last line without one may then be a byte longer: checked below.
	sc.Buffer(make([]byte, 0, min(64<<10, maxLine+1)), maxLine+1)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) > maxLine {
			return &LineError{Line: line, Msg: fmt.Sprintf("longer than %d bytes", maxLine), Err: bufio.ErrTooLong}
		}
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		res, msg, err := parseResult(b)
		if msg != "" {
			return &LineError{Line: line, Msg: msg, Err: err}
		}
		if err := fn(line, res); err != nil {
			return &LineError{Line: line, Msg: "not taken", Err: err}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &LineError{Line: line + 1, Msg: fmt.Sprintf("longer than %d bytes", maxLine), Err: err}
		}
		return &LineError{Line: line + 1, Msg: "cannot be read", Err: err}
	}
	return nil
}

// parseResult reads one line. It returns what is wrong with it ("" when
// nothing is) and the cause, if any.
func parseResult(b []byte) (Result, string, error) {
	var w wireResult
	if b[0] != '{' {
		return Result{}, "not a JSON object", nil
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return Result{}, "not valid JSON", nil
	}
	if mayRepeat(b) && repeatsKey(b) {
		// encoding/json keeps the last of a repeated key: which custom_id,
		// response or error the provider meant is not known.
		return Result{}, "a key given twice", nil
	}
	var res Result
	if isAbsent(w.CustomID) {
		return Result{}, "no custom_id", nil
	}
	if json.Unmarshal(w.CustomID, &res.CustomID) != nil {
		return Result{}, "custom_id is not a string", nil
	}
	idx, err := ParseCustomID(res.CustomID)
	if err != nil {
		return Result{}, "custom_id of the wrong form", err
	}
	res.Index = idx
	if !isAbsent(w.ID) && json.Unmarshal(w.ID, &res.ID) != nil {
		return Result{}, "id is not a string", nil
	}
	hasResp, hasErr := !isAbsent(w.Response), !isAbsent(w.Error)
	switch {
	case hasResp && hasErr:
		return Result{}, "both a response and an error", nil
	case hasResp:
		if msg := readResponse(w.Response, &res); msg != "" {
			return Result{}, msg, nil
		}
	case hasErr:
		code, message, ok := readError(w.Error)
		if !ok {
			return Result{}, "error is not an object with a string code", nil
		}
		res.ErrCode, res.ErrMessage = code, message
	default:
		return Result{}, "neither a response nor an error", nil
	}
	return res, "", nil
}

// keys is what a line's top level is read for.
var keys = [][]byte{[]byte(`"custom_id"`), []byte(`"response"`), []byte(`"error"`)}

// mayRepeat reports whether a key ReadResults reads shows more than once
// in the line, anywhere: the cheap test before repeatsKey reads the line's
// top level.
func mayRepeat(b []byte) bool {
	for _, k := range keys {
		if bytes.Count(b, k) > 1 {
			return true
		}
	}
	return false
}

// repeatsKey reports whether a valid JSON object has a key twice at its top
// level.
func repeatsKey(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil { // {
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		k, _ := tok.(string)
		if seen[k] {
			return true
		}
		seen[k] = true
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return false
		}
	}
	return false
}

// readResponse reads a line's response into res; it returns what is wrong
// with it, or "".
func readResponse(raw json.RawMessage, res *Result) string {
	var resp wireResponse
	if raw[0] != '{' || json.Unmarshal(raw, &resp) != nil {
		return "response is not an object"
	}
	if resp.StatusCode == nil || *resp.StatusCode < 100 || *resp.StatusCode > 599 {
		return "response has no status_code between 100 and 599"
	}
	if isAbsent(resp.Body) {
		return "response has no body"
	}
	res.StatusCode = *resp.StatusCode
	if resp.RequestID != nil {
		res.RequestID = clean(*resp.RequestID, 100)
	}
	res.Body = append([]byte(nil), resp.Body...) // the scanner's buffer is reused
	if !res.OK() {
		var doc struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(resp.Body, &doc) == nil && !isAbsent(doc.Error) {
			res.ErrCode, res.ErrMessage, _ = readError(doc.Error)
		}
	}
	return ""
}

// readError reads an OpenAI error object's code and message. A code may be
// a string, a number (older vLLM) or null; a message a string or absent.
func readError(raw json.RawMessage) (code, message string, ok bool) {
	var e wireError
	if raw[0] != '{' || json.Unmarshal(raw, &e) != nil {
		return "", "", false
	}
	if !isAbsent(e.Code) {
		var s string
		var n json.Number
		switch {
		case json.Unmarshal(e.Code, &s) == nil:
			code = s
		case json.Unmarshal(e.Code, &n) == nil:
			code = n.String()
		default:
			return "", "", false
		}
	}
	if !isAbsent(e.Message) {
		var s string
		if json.Unmarshal(e.Message, &s) != nil {
			return "", "", false
		}
		message = Summarise(s)
	}
	return clean(code, 100), message, true
}

// isAbsent reports whether a raw field is missing or null.
func isAbsent(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// Summarise makes a provider's message safe to keep and show: one line
// (control and format characters become spaces, runs of spaces one),
// invalid UTF-8 replaced, the given secrets and anything that looks like a
// credential redacted, at most MaxMessage characters.
func Summarise(s string, secrets ...string) string {
	return redact.Line(s, MaxMessage, secrets...)
}

// clean keeps the printable ASCII of an id or a code, at most n bytes.
func clean(s string, n int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < n; i++ {
		if c := s[i]; c > ' ' && c < 0x7f && c != '"' && c != '\\' {
			b.WriteByte(c)
		}
	}
	return b.String()
}
