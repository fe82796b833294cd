package provider

import (
	"bytes"
	"encoding/json"
)

// Answer shapes, as AnswerShape names them.
const (
	ShapeNested = "nested" // [[{label,score},...], ...]: one list per input (the HF API)
	ShapeFlat   = "flat"   // [{label,score},...]: what some other servers send
)

// AnswerShape names the form of a classification answer body: ShapeNested,
// ShapeFlat, or "" when it is neither. It looks only at the structure, so
// that a preflight can say what a server sends without echoing the body.
func AnswerShape(body []byte) string {
	var items []json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(body), &items) != nil || len(items) == 0 {
		return ""
	}
	switch first := bytes.TrimSpace(items[0]); {
	case len(first) > 0 && first[0] == '[':
		return ShapeNested
	case len(first) > 0 && first[0] == '{':
		return ShapeFlat
	}
	return ""
}
