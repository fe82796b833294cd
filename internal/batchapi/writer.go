package batchapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// RequestWriter writes a batch's input file: one JSONL line per request,
// {"custom_id":"r17","method":"POST","url":"/v1/chat/completions","body":{...}},
// the body embedded as given (it is exactly what a live call sends). It
// refuses a custom_id CustomID would not make, one already written, and a
// body that is not one JSON object: a file the provider would reject, or
// whose answers could not be mapped back, is never written.
//
// It is not safe for concurrent use.
type RequestWriter struct {
	w     io.Writer
	line  []byte // reused: one Write to w per line
	seen  map[int]struct{}
	lines int
	bytes int64
}

// NewRequestWriter returns a writer of request lines to w. Each line is
// one Write call to w: buffer w if it is a file.
func NewRequestWriter(w io.Writer) *RequestWriter {
	return &RequestWriter{w: w, seen: map[int]struct{}{}}
}

// Write writes one request line and returns its length in bytes, the
// newline included (what it adds to the file's size).
func (w *RequestWriter) Write(customID string, body []byte) (n int64, err error) {
	idx, err := ParseCustomID(customID)
	if err != nil {
		return 0, err
	}
	if _, dup := w.seen[idx]; dup {
		return 0, fmt.Errorf("custom_id %s written twice", customID)
	}
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' || !json.Valid(body) {
		return 0, fmt.Errorf("request %s: the body is not a JSON object", customID)
	}
	b := w.line[:0]
	b = append(b, `{"custom_id":"`...)
	b = append(b, customID...) // r and digits: nothing to escape
	b = append(b, `","method":"POST","url":"`+EndpointChat+`","body":`...)
	if bytes.ContainsAny(body, "\r\n") {
		// Whitespace between tokens (a JSON string holds no raw line
		// break): compacted, or the line would be several.
		var c bytes.Buffer
		if err := json.Compact(&c, body); err != nil {
			return 0, fmt.Errorf("request %s: %w", customID, err)
		}
		body = c.Bytes()
	}
	b = append(b, body...)
	b = append(b, "}\n"...)
	w.line = b
	if len(b) > 1<<20 {
		w.line = nil // a rare huge line is not kept
	}
	k, err := w.w.Write(b)
	w.bytes += int64(k)
	if err != nil {
		return int64(k), err
	}
	if k != len(b) {
		return int64(k), io.ErrShortWrite
	}
	w.seen[idx] = struct{}{}
	w.lines++
	return int64(k), nil
}

// Lines is how many lines have been written.
func (w *RequestWriter) Lines() int { return w.lines }

// Bytes is how many bytes have been written.
func (w *RequestWriter) Bytes() int64 { return w.bytes }

// LineBytes is the length Write would give a line for customID and body
// (body already on one line), without writing it: for splitting an input
// under a file-size limit before writing.
func LineBytes(customID string, body []byte) int64 {
	const fixed = len(`{"custom_id":"","method":"POST","url":"` + EndpointChat + `","body":}` + "\n")
	return int64(fixed + len(customID) + len(bytes.TrimSpace(body)))
}
