package fakehf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TEI emulates text-embeddings-inference's POST /predict for a two-label
// sequence-classification model, as its router/src/http/types.rs and
// server.rs define it:
//
//   - "inputs": "a" is one text; ["a", "b"] is ONE pair of texts (a list
//     whose first element is a string is a sequence, of one or two strings;
//     a third is an error); [["a"], ["b", "c"]] is a batch of a text and a
//     pair. Unknown fields ("parameters") are ignored; "truncate" is read.
//   - One sequence is answered with the flat list of every label sorted by
//     score, highest first ([{"score","label"}, ...]); a batch with one
//     such list per sequence.
//   - A body it cannot read is 422 with axum's text/plain rejection; a
//     batch over MaxClientBatch is 422 {"error", "error_type":
//     "validation"}; an empty batch 400; more requests at once than
//     MaxConcurrent 429 "Model is overloaded", with no Retry-After.
//
// A pair's label is the model's answer for both texts read together, as a
// cross-encoder reads them.
type TEI struct {
	Latency        time.Duration
	MaxClientBatch int    // default 32
	MaxConcurrent  int    // 0: no limit
	APIKey         string // when set, other calls get 401 with no body

	calls    atomic.Int64
	inFlight atomic.Int64
	mu       sync.Mutex
	bodies   [][]byte
}

// Calls is the number of requests received.
func (t *TEI) Calls() int64 { return t.calls.Load() }

// Bodies are the request bodies received, in arrival order.
func (t *TEI) Bodies() [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([][]byte(nil), t.bodies...)
}

type teiPrediction struct {
	Score float64 `json:"score"`
	Label string  `json:"label"`
}

func (t *TEI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t.calls.Add(1)
	n := t.inFlight.Add(1)
	defer t.inFlight.Add(-1)
	body, _ := io.ReadAll(io.LimitReader(r.Body, 2<<20))
	t.mu.Lock()
	t.bodies = append(t.bodies, body)
	t.mu.Unlock()
	if r.Method != http.MethodPost || strings.TrimRight(r.URL.Path, "/") != "/predict" && r.URL.Path != "/" {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	if t.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+t.APIKey {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if t.MaxConcurrent > 0 && n > int64(t.MaxConcurrent) {
		teiError(w, http.StatusTooManyRequests, "Model is overloaded", "overloaded")
		return
	}
	var req struct {
		Inputs   json.RawMessage `json:"inputs"`
		Truncate *bool           `json:"truncate"`
	}
	if err := json.Unmarshal(body, &req); err != nil || req.Inputs == nil {
		rejection(w, "missing field `inputs`")
		return
	}
	seqs, batch, problem := teiInputs(req.Inputs)
	if problem != "" {
		rejection(w, "inputs: "+problem)
		return
	}
	limit := t.MaxClientBatch
	if limit <= 0 {
		limit = 32
	}
	switch {
	case batch && len(seqs) == 0:
		teiError(w, http.StatusBadRequest, "Batch is empty", "empty")
		return
	case batch && len(seqs) > limit:
		teiError(w, http.StatusUnprocessableEntity, fmt.Sprintf("batch size %d > maximum allowed batch size %d", len(seqs), limit), "validation")
		return
	}
	if !sleep(r, t.Latency) {
		return
	}
	out := make([][]teiPrediction, len(seqs))
	for i, s := range seqs {
		out[i] = teiPredict(strings.Join(s, " "))
	}
	w.Header().Set("Content-Type", "application/json")
	// TEI's own timing headers, by which check tells a TEI server.
	w.Header().Set("x-compute-type", "gpu+optimized")
	w.Header().Set("x-tokenization-time", "0")
	w.Header().Set("x-queue-time", "0")
	w.Header().Set("x-inference-time", "1")
	var v any = out
	if !batch {
		v = out[0]
	}
	_ = json.NewEncoder(w).Encode(v)
}

// teiPredict is the model's answer for one sequence: both labels, sorted by
// score, highest first.
func teiPredict(text string) []teiPrediction {
	label, score := Label(text)
	other := "NEGATIVE"
	if label == "NEGATIVE" {
		other = "POSITIVE"
	}
	p := []teiPrediction{{score, label}, {1 - score, other}}
	sort.SliceStable(p, func(i, j int) bool { return p[i].Score > p[j].Score })
	return p
}

// teiInputs reads "inputs" as TEI's PredictInput does: the sequences and
// whether it was a batch, or what is wrong with it.
func teiInputs(raw json.RawMessage) ([][]string, bool, string) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return [][]string{{one}}, false, ""
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, false, "invalid type, expected a string, a pair of strings [string, string] or a batch of mixed strings and pairs [[string], [string, string], ...]"
	}
	if len(items) == 0 {
		return nil, false, "invalid length 0, expected a string, a pair of strings [string, string] or a batch of mixed strings and pairs [[string], [string, string], ...]"
	}
	if json.Unmarshal(items[0], &one) == nil {
		// Not a batch: one sequence of one or two strings.
		seq := make([]string, len(items))
		for i, it := range items {
			if json.Unmarshal(it, &seq[i]) != nil {
				return nil, false, "invalid type: sequence, expected a string"
			}
		}
		if len(seq) > 2 {
			return nil, false, fmt.Sprintf("invalid length %d, expected a string, a pair of strings [string, string] or a batch of mixed strings and pairs [[string], [string, string], ...]", len(seq))
		}
		return [][]string{seq}, false, ""
	}
	seqs := make([][]string, len(items))
	for i, it := range items {
		if json.Unmarshal(it, &seqs[i]) != nil || len(seqs[i]) < 1 || len(seqs[i]) > 2 {
			return nil, true, fmt.Sprintf("invalid length %d, expected a string, a pair of strings [string, string] or a batch of mixed strings and pairs [[string], [string, string], ...]", len(seqs[i]))
		}
	}
	return seqs, true, ""
}

func teiError(w http.ResponseWriter, status int, msg, kind string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"error": msg, "error_type": kind})
	_, _ = w.Write(b)
}

// rejection is axum's answer to a body its Json extractor cannot read, as
// the recordings show it: 422, text/plain.
func rejection(w http.ResponseWriter, what string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusUnprocessableEntity)
	var b bytes.Buffer
	fmt.Fprintf(&b, "Failed to deserialize the JSON body into the target type: %s at line 1 column 1", what)
	_, _ = w.Write(b.Bytes())
}
