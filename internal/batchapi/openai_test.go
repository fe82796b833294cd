package batchapi

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// openAI is a loopback server that answers the Files and Batches routes
// the way OpenAI does (shapes from openai-python's types: FileObject,
// Batch, BatchRequestCounts, Errors). It keeps what it was sent.
type openAI struct {
	t     *testing.T
	token string
	mu    sync.Mutex
	files map[string][]byte
	// purpose and filename of the last upload; create bodies received.
	purpose, filename, fileType string
	creates                     []map[string]any
	batches                     map[string]map[string]any
	// fail, when set, answers a request instead (status, body, headers).
	fail func(r *http.Request) (int, string, http.Header, bool)
	hits map[string]int
}

func newOpenAI(t *testing.T) (*openAI, *httptest.Server) {
	o := &openAI{t: t, token: "sk-test-0123456789abcdefXYZ", files: map[string][]byte{}, batches: map[string]map[string]any{}, hits: map[string]int{}}
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	return o, srv
}

func (o *openAI) client(srv *httptest.Server) *Client {
	return &Client{HTTP: srv.Client(), Root: srv.URL + "/v1", Token: o.token, Backoff: 1}
}

func (o *openAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.hits[r.Method+" "+route(r.URL.Path)]++
	fail := o.fail
	o.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+o.token {
		writeJSON(w, 401, fmt.Sprintf(`{"error":{"message":"Incorrect API key provided: %s.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`, r.Header.Get("Authorization")))
		return
	}
	if fail != nil {
		if code, body, h, ok := fail(r); ok {
			for k, v := range h {
				w.Header()[k] = v
			}
			writeJSON(w, code, body)
			return
		}
	}
	p := strings.TrimPrefix(r.URL.Path, "/v1")
	switch {
	case r.Method == "POST" && p == "/files":
		o.upload(w, r)
	case r.Method == "POST" && p == "/batches":
		o.create(w, r)
	case r.Method == "GET" && strings.HasPrefix(p, "/files/") && strings.HasSuffix(p, "/content"):
		id := strings.TrimSuffix(strings.TrimPrefix(p, "/files/"), "/content")
		o.mu.Lock()
		b, ok := o.files[id]
		o.mu.Unlock()
		if !ok {
			writeJSON(w, 404, `{"error":{"message":"No such File object: `+id+`","type":"invalid_request_error","param":"id","code":null}}`)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(b)
	case strings.HasPrefix(p, "/batches/"):
		id, cancel := strings.CutSuffix(strings.TrimPrefix(p, "/batches/"), "/cancel")
		o.mu.Lock()
		b, ok := o.batches[id]
		if ok && cancel {
			b["status"] = StatusCancelling
		}
		o.mu.Unlock()
		if !ok {
			writeJSON(w, 404, `{"error":{"message":"No batch found with id '`+id+`'.","type":"invalid_request_error","param":null,"code":null}}`)
			return
		}
		out, _ := json.Marshal(b)
		writeJSON(w, 200, string(out))
	default:
		http.NotFound(w, r)
	}
}

func route(p string) string {
	switch {
	case strings.HasSuffix(p, "/content"):
		return "content"
	case strings.HasSuffix(p, "/cancel"):
		return "cancel"
	case strings.Contains(p, "/batches/"):
		return "batch"
	}
	return strings.TrimPrefix(p, "/v1/")
}

func (o *openAI) upload(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		writeJSON(w, 400, `{"error":{"message":"not multipart","type":"invalid_request_error","param":null,"code":null}}`)
		return
	}
	var purpose, filename, ctype string
	var data []byte
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			writeJSON(w, 400, `{"error":{"message":"bad multipart","type":"invalid_request_error","param":null,"code":null}}`)
			return
		}
		b, _ := io.ReadAll(part)
		switch part.FormName() {
		case "purpose":
			purpose = string(b)
		case "file":
			filename, ctype, data = part.FileName(), part.Header.Get("Content-Type"), b
		}
	}
	o.mu.Lock()
	id := fmt.Sprintf("file-%d", len(o.files)+1)
	o.files[id] = data
	o.purpose, o.filename, o.fileType = purpose, filename, ctype
	o.mu.Unlock()
	writeJSON(w, 200, fmt.Sprintf(`{"id":%q,"object":"file","bytes":%d,"created_at":1700000000,"filename":%q,"purpose":%q,"status":"processed","status_details":null}`,
		id, len(data), filename, purpose))
}

func (o *openAI) create(w http.ResponseWriter, r *http.Request) {
	var in map[string]any
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		writeJSON(w, 400, `{"error":{"message":"bad json","type":"invalid_request_error","param":null,"code":null}}`)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.creates = append(o.creates, in)
	id := fmt.Sprintf("batch_%d", len(o.batches)+1)
	b := map[string]any{"id": id, "object": "batch", "endpoint": in["endpoint"], "errors": nil,
		"input_file_id": in["input_file_id"], "completion_window": in["completion_window"], "status": StatusValidating,
		"output_file_id": nil, "error_file_id": nil, "created_at": 1700000000, "in_progress_at": nil,
		"expires_at": 1700086400, "finalizing_at": nil, "completed_at": nil, "failed_at": nil, "expired_at": nil,
		"cancelling_at": nil, "cancelled_at": nil, "request_counts": map[string]int{"total": 0, "completed": 0, "failed": 0},
		"metadata": nil}
	o.batches[id] = b
	out, _ := json.Marshal(b)
	writeJSON(w, 200, string(out))
}

func (o *openAI) set(id string, f func(b map[string]any)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o.batches[id])
}

func (o *openAI) hit(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[k]
}

func writeJSON(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	io.WriteString(w, body)
}
