package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// openAPIDoc is /openapi.json, parsed, with its schemas compiled by a JSON
// Schema 2020-12 validator (the dialect of OpenAPI 3.1).
type openAPIDoc struct {
	t     *testing.T
	raw   map[string]any
	paths map[string]map[string]any
	c     *jsonschema.Compiler
}

func loadOpenAPI(t *testing.T, h *harness) *openAPIDoc {
	t.Helper()
	a := h.get(PathOpenAPI)
	if a.status != 200 || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("/openapi.json: %d %s", a.status, a.header.Get("Content-Type"))
	}
	d := &openAPIDoc{t: t, paths: map[string]map[string]any{}}
	if err := json.Unmarshal(a.body, &d.raw); err != nil {
		t.Fatalf("/openapi.json is not JSON: %v", err)
	}
	if d.raw["openapi"] != "3.1.0" {
		t.Fatalf("openapi %v, want 3.1.0", d.raw["openapi"])
	}
	for p, ops := range d.raw["paths"].(map[string]any) {
		d.paths[p] = ops.(map[string]any)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(a.body))
	if err != nil {
		t.Fatal(err)
	}
	d.c = jsonschema.NewCompiler()
	d.c.DefaultDraft(jsonschema.Draft2020)
	if err := d.c.AddResource("http://hfsent.test/openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	return d
}

func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// schema compiles the schema at a JSON pointer into the document.
func (d *openAPIDoc) schema(ptr string) *jsonschema.Schema {
	d.t.Helper()
	s, err := d.c.Compile("http://hfsent.test/openapi.json#" + ptr)
	if err != nil {
		d.t.Fatalf("schema %s: %v", ptr, err)
	}
	return s
}

// checkAnswer fails unless the document lists a's status for the route and
// a's body is valid against the schema it gives.
func (d *openAPIDoc) checkAnswer(path, method string, a answer) {
	d.t.Helper()
	op, ok := d.paths[path][strings.ToLower(method)].(map[string]any)
	if !ok {
		d.t.Fatalf("%s %s is not in the document", method, path)
	}
	resp, ok := op["responses"].(map[string]any)[strconv.Itoa(a.status)].(map[string]any)
	if !ok {
		d.t.Fatalf("%s %s answered %d, which the document does not list: %s", method, path, a.status, a.body)
	}
	headers, _ := resp["headers"].(map[string]any)
	if _, ok := headers["Retry-After"]; a.status == 503 && !ok {
		d.t.Errorf("%s %s: the document does not give the 503 a Retry-After", method, path)
	}
	ct := a.header.Get("Content-Type")
	content, _ := resp["content"].(map[string]any)
	if _, ok := content[strings.Split(ct, ";")[0]]; !ok {
		d.t.Fatalf("%s %s %d: Content-Type %s is not documented", method, path, a.status, ct)
	}
	if ct != "application/json" {
		return
	}
	ptr := fmt.Sprintf("/paths/%s/%s/responses/%d/content/application~1json/schema", pointerEscape(path), strings.ToLower(method), a.status)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(a.body))
	if err != nil {
		d.t.Fatalf("%s %s %d: body is not JSON: %s", method, path, a.status, a.body)
	}
	if err := d.schema(ptr).Validate(inst); err != nil {
		d.t.Errorf("%s %s %d: the body does not match the document: %v\n%s", method, path, a.status, err, a.body)
	}
}

// TestOpenAPIMatchesTheHandlers: every route the document lists is
// answered, with the methods it lists (405 with that Allow for the others);
// every answer the handlers give (successes, each error) is a status the
// document lists for the route, with a body its schema accepts; the
// request schemas accept what the handlers accept and refuse what they
// answer 422.
func TestOpenAPIMatchesTheHandlers(t *testing.T) {
	g := newGate()
	f := &fakehf.Fake{Script: func(_ int64, texts []string, r *http.Request) fakehf.Reply {
		switch t := texts[0]; {
		case strings.Contains(t, "#held"):
			g.wait(r)
		case strings.Contains(t, "#500"):
			return fakehf.Reply{Status: 500}
		case strings.Contains(t, "#slow"):
			return fakehf.Reply{Delay: 5 * time.Second}
		}
		return fakehf.Reply{}
	}}
	h := start(t, f, func(s *setup) {
		s.res.Concurrency = 1
		s.res.Retries = 0
		// Long enough that the held call still holds the only slot when
		// the next request comes, on a loaded machine (at 50 ms it had
		// timed out and freed the slot in 15 of 40 runs under -race).
		s.res.Timeout = 2 * time.Second
		s.cfg.MaxBody = 4096
		s.cfg.MaxItems = 4
		s.cfg.Pipeline.Rules.MaxChars = 100
		s.cfg.Pipeline.Rules.MaxIDChars = 16
	})
	d := loadOpenAPI(t, h)

	// The routes: the document's, and nothing else.
	var documented []string
	for p, ops := range d.paths {
		documented = append(documented, p)
		var methods []string
		for m := range ops {
			methods = append(methods, strings.ToUpper(m))
		}
		for _, m := range methods {
			body := []byte(`{"request_id": "route", "text": "a route check"}`)
			a := h.do(context.Background(), m, p, "application/json", body)
			if a.status == 404 || a.status == 405 {
				t.Errorf("%s %s is documented but answered %d", m, p, a.status)
			}
			d.checkAnswer(p, m, a)
		}
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			if slices.Contains(methods, m) {
				continue
			}
			a := h.do(context.Background(), m, p, "application/json", nil)
			if a.status != 405 {
				t.Errorf("%s %s is not documented but answered %d", m, p, a.status)
				continue
			}
			want := strings.Join(methods, ", ")
			if slices.Contains(methods, "GET") {
				want += ", HEAD"
			}
			if a.header.Get("Allow") != want {
				t.Errorf("%s %s: Allow %q, the document says %q", m, p, a.header.Get("Allow"), want)
			}
			inst, _ := jsonschema.UnmarshalJSON(bytes.NewReader(a.body))
			if err := d.schema("/components/schemas/Error405").Validate(inst); err != nil {
				t.Errorf("%s %s: the 405 does not match the document: %v", m, p, err)
			}
		}
	}
	sort.Strings(documented)
	var routes []string
	for p := range h.s.Routes() {
		routes = append(routes, p)
	}
	sort.Strings(routes)
	if !slices.Equal(documented, routes) {
		t.Fatalf("documented paths %v, routes %v", documented, routes)
	}

	// Every kind of answer, checked against the document.
	post := func(path, ctype, body string) answer {
		return h.do(context.Background(), http.MethodPost, path, ctype, []byte(body))
	}
	const js = "application/json"
	d.checkAnswer(PathFeedback, "POST", post(PathFeedback, js, `{"request_id": "ok", "text": "fine"}`))
	d.checkAnswer(PathFeedback, "POST", post(PathFeedback, js, `{"request_id": "bad", "text": ""}`))
	d.checkAnswer(PathFeedback, "POST", post(PathFeedback, "text/plain", `{}`))
	d.checkAnswer(PathFeedback, "POST", post(PathFeedback, js, `{"text": "`+strings.Repeat("a", 5000)+`"}`))
	d.checkAnswer(PathFeedback, "POST", post(PathFeedback, js, `{"request_id": "f", "text": "#500"}`))
	d.checkAnswer(PathFeedback, "POST", post(PathFeedback, js, `{"request_id": "s", "text": "#slow"}`))
	held := make(chan answer, 1)
	// The held call has reached the fake once the fake has counted it (its
	// in-flight count alone may still be the last call's, whose handler
	// ends just after its answer is written).
	calls := f.Calls()
	go func() { held <- post(PathFeedback, js, `{"request_id": "h", "text": "#held"}`) }()
	waitFor(t, "the slot held", func() bool { return f.Calls() > calls })
	busy := post(PathFeedback, js, `{"request_id": "busy", "text": "no slot"}`)
	if busy.status != 503 {
		t.Fatalf("with the only slot held: %d %s", busy.status, busy.body)
	}
	d.checkAnswer(PathFeedback, "POST", busy)
	g.open()
	d.checkAnswer(PathFeedback, "POST", <-held)
	d.checkAnswer(PathClassify, "POST", post(PathClassify, js, `{"items": [{"request_id": "a", "text": "fine"}, {"request_id": "b", "text": " "}, {"request_id": "c", "text": "#500"}, {"x": 1}]}`))
	d.checkAnswer(PathClassify, "POST", post(PathClassify, js, `{"items": []}`))
	d.checkAnswer(PathReadyz, "GET", h.get(PathReadyz))

	// The request schemas agree with the handlers' validation. (An item
	// of /v1/classify that its schema refuses is answered in its place,
	// the request 200: the document says so, and it is not tried here.)
	feedbackReq := d.schema("/paths/" + pointerEscape(PathFeedback) + "/post/requestBody/content/application~1json/schema")
	classifyReq := d.schema("/paths/" + pointerEscape(PathClassify) + "/post/requestBody/content/application~1json/schema")
	for _, c := range []struct {
		path, body string
		schema     *jsonschema.Schema
	}{
		{PathFeedback, `{"request_id": "agree1", "text": "fine"}`, feedbackReq},
		{PathFeedback, `{"request_id": "agree2", "text": "` + strings.Repeat("é", 100) + `"}`, feedbackReq},
		{PathFeedback, `{"request_id": "agree3", "text": "` + strings.Repeat("é", 101) + `"}`, feedbackReq},
		{PathFeedback, `{"request_id": "` + strings.Repeat("i", 17) + `", "text": "fine"}`, feedbackReq},
		{PathFeedback, `{"request_id": "agree5", "text": "  "}`, feedbackReq},
		{PathFeedback, `{"request_id": " ", "text": "fine"}`, feedbackReq},
		{PathFeedback, `{"request_id": "agree7"}`, feedbackReq},
		{PathFeedback, `{"request_id": "agree8", "text": "fine", "more": 1}`, feedbackReq},
		{PathFeedback, `{"request_id": 9, "text": "fine"}`, feedbackReq},
		{PathClassify, `{"items": [{"request_id": "agree10", "text": "fine"}]}`, classifyReq},
		{PathClassify, `{"items": []}`, classifyReq},
		{PathClassify, `{"items": [{}, {}, {}, {}, {}]}`, classifyReq},
		{PathClassify, `{}`, classifyReq},
	} {
		a := post(c.path, js, c.body)
		inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(c.body))
		schemaOK := c.schema.Validate(inst) == nil
		if (a.status == 200) != schemaOK {
			t.Errorf("%s %s: the handler answered %d, the document's schema says valid=%v", c.path, limit(c.body, 60), a.status, schemaOK)
		}
	}
}
