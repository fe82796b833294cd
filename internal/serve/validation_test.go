package serve

import (
	"bytes"
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// TestValidation: every 4xx a caller can get, each naming what is wrong
// (the field, for a 422), and none reaching the provider. The rules are
// classify's (engine.Rules), plus serve's id bounds.
func TestValidation(t *testing.T) {
	f := &fakehf.Fake{}
	h := start(t, f, func(s *setup) {
		s.cfg.Pipeline.Rules.MaxChars = 20
		s.cfg.Pipeline.Rules.MaxIDChars = 128
		s.cfg.MaxBody = 2048
		s.cfg.MaxItems = 3
	})
	long := strings.Repeat("x", 129)
	cases := []struct {
		name, method, path, ctype, body string
		status                          int
		code, field, message            string
	}{
		{"missing request_id", "POST", PathFeedback, "application/json", `{"text": "fine"}`, 422, "invalid_input", "request_id", "missing request id"},
		{"blank request_id", "POST", PathFeedback, "application/json", `{"request_id": "  ", "text": "fine"}`, 422, "invalid_input", "request_id", "missing request id"},
		{"null request_id", "POST", PathFeedback, "application/json", `{"request_id": null, "text": "fine"}`, 422, "invalid_input", "request_id", "missing request id"},
		{"request_id over 128", "POST", PathFeedback, "application/json", `{"request_id": "` + long + `", "text": "fine"}`, 422, "invalid_input", "request_id", "request id has 129 characters, over 128"},
		{"missing text", "POST", PathFeedback, "application/json", `{"request_id": "r"}`, 422, "invalid_input", "text", "blank text"},
		{"blank text", "POST", PathFeedback, "application/json", `{"request_id": "r", "text": " \t\n"}`, 422, "invalid_input", "text", "blank text"},
		{"text over --max-chars", "POST", PathFeedback, "application/json", `{"request_id": "r", "text": "ééééééééééééééééééééé"}`, 422, "invalid_input", "text", "text has 21 characters, over --max-chars 20"},
		{"unknown field", "POST", PathFeedback, "application/json", `{"request_id": "r", "text": "fine", "lang": "en"}`, 422, "invalid_input", "lang", "unknown field"},
		{"request_id a number", "POST", PathFeedback, "application/json", `{"request_id": 12, "text": "fine"}`, 422, "invalid_input", "request_id", "want a string, got number"},
		{"text a list", "POST", PathFeedback, "application/json", `{"request_id": "r", "text": ["a"]}`, 422, "invalid_input", "text", "want a string, got array"},
		{"trailing garbage", "POST", PathFeedback, "application/json", `{"request_id": "r", "text": "fine"} {"x": 1}`, 422, "invalid_input", "body", "unexpected data after the JSON object"},
		{"trailing junk", "POST", PathFeedback, "application/json", `{"request_id": "r", "text": "fine"}xyz`, 422, "invalid_input", "body", "unexpected data after the JSON object"},
		{"not JSON", "POST", PathFeedback, "application/json", `request_id=r&text=fine`, 422, "invalid_input", "body", "not valid JSON (at byte 1)"},
		{"truncated", "POST", PathFeedback, "application/json", `{"request_id": "r", "te`, 422, "invalid_input", "body", "the JSON ends too soon"},
		{"empty body", "POST", PathFeedback, "application/json", ``, 422, "invalid_input", "body", "empty: want a JSON object"},
		{"a list, not an object", "POST", PathFeedback, "application/json", `[{"request_id": "r", "text": "fine"}]`, 422, "invalid_input", "body", "want a JSON object, got array"},
		{"invalid UTF-8", "POST", PathFeedback, "application/json", "{\"request_id\": \"r\", \"text\": \"caf\xe9\"}", 422, "invalid_input", "body", "not valid UTF-8"},
		{"form content type", "POST", PathFeedback, "application/x-www-form-urlencoded", `{"request_id": "r", "text": "fine"}`, 415, "unsupported_media_type", "", "Content-Type must be application/json"},
		{"no content type", "POST", PathFeedback, "", `{"request_id": "r", "text": "fine"}`, 415, "unsupported_media_type", "", "Content-Type must be application/json"},
		{"body over --max-body", "POST", PathFeedback, "application/json", `{"request_id": "r", "text": "` + strings.Repeat("a", 3000) + `"}`, 413, "request_too_large", "", "body over 2048 bytes (--max-body)"},
		{"GET on a POST route", "GET", PathFeedback, "", ``, 405, "method_not_allowed", "", "GET is not allowed here; allowed: POST"},
		{"POST on a GET route", "POST", PathHealthz, "application/json", `{}`, 405, "method_not_allowed", "", "POST is not allowed here; allowed: GET, HEAD"},
		{"no such route", "GET", "/predict", "", ``, 404, "not_found", "", `no route "/predict"; see /openapi.json`},
		{"items missing", "POST", PathClassify, "application/json", `{}`, 422, "invalid_input", "items", `missing: want a list of {"request_id", "text"}`},
		{"items empty", "POST", PathClassify, "application/json", `{"items": []}`, 422, "invalid_input", "items", "empty: want at least one item"},
		{"items over --max-items", "POST", PathClassify, "application/json", `{"items": [{},{},{},{}]}`, 422, "invalid_input", "items", "4 items, over --max-items 3"},
		{"items not a list", "POST", PathClassify, "application/json", `{"items": {"request_id": "r"}}`, 422, "invalid_input", "items", "want an array, got object"},
		{"items and more", "POST", PathClassify, "application/json", `{"items": [], "model": "x"}`, 422, "invalid_input", "model", "unknown field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := h.do(context.Background(), c.method, c.path, c.ctype, []byte(c.body))
			if a.status != c.status {
				t.Fatalf("status %d, want %d: %s", a.status, c.status, a.body)
			}
			d := a.detail(t)
			field, _ := d["field"].(string)
			if d["code"] != c.code || field != c.field || d["message"] != c.message {
				t.Fatalf("detail %s, want code %s, field %q, message %q", a.body, c.code, c.field, c.message)
			}
			if c.status == 405 {
				want := "POST"
				if c.path == PathHealthz {
					want = "GET, HEAD"
				}
				if got := a.header.Get("Allow"); got != want {
					t.Fatalf("Allow %q, want %q", got, want)
				}
			}
			if ct := a.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
		})
	}
	// A body over --max-body sent without a length (chunked) is cut off
	// while it is read.
	req, _ := http.NewRequest(http.MethodPost, h.url+PathFeedback, struct{ *bytes.Reader }{bytes.NewReader([]byte(`{"request_id": "r", "text": "` + strings.Repeat("a", 5000) + `"}`))})
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = -1
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("chunked body over --max-body: %d", resp.StatusCode)
	}
	if f.Calls() != 0 {
		t.Fatalf("%d invalid requests reached the provider", f.Calls())
	}
	// A JSON content type with parameters, or a +json type, is JSON.
	for _, ct := range []string{"application/json; charset=utf-8", "application/problem+json"} {
		if a := h.do(context.Background(), "POST", PathFeedback, ct, []byte(`{"request_id": "ct", "text": "fine"}`)); a.status != 200 {
			t.Fatalf("Content-Type %s: %d %s", ct, a.status, a.body)
		}
	}
}

// TestIDPattern: --id-pattern must match the whole id.
func TestIDPattern(t *testing.T) {
	h := start(t, &fakehf.Fake{}, func(s *setup) {
		s.cfg.Pipeline.Rules.MaxIDChars = 128
		s.cfg.Pipeline.Rules.IDPattern = regexp.MustCompile(`^(?:[a-z]+-[0-9]+)$`)
	})
	if a := h.feedback("order-42", "fine"); a.status != 200 {
		t.Fatalf("a matching id: %d %s", a.status, a.body)
	}
	for _, id := range []string{"order-42x", "order_42", "ORDER-42"} {
		a := h.feedback(id, "fine")
		if a.status != 422 || a.detail(t)["field"] != "request_id" || !strings.Contains(a.detail(t)["message"].(string), "--id-pattern") {
			t.Fatalf("id %q: %d %s", id, a.status, a.body)
		}
	}
}
