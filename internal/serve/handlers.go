package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// textRequest is the body of POST /feedback-sentiment, and one item of
// POST /v1/classify.
type textRequest struct {
	RequestID string `json:"request_id"`
	Text      string `json:"text"`
}

// feedbackResponse is the answer of the service hfsent replaces: keep
// these names.
type feedbackResponse struct {
	RequestID string   `json:"request_id"`
	Label     string   `json:"label"`
	Score     *float64 `json:"score"` // null: a chat answer without logprobs
	Model     string   `json:"model"`
	// With --calibration, the model's own score (score is the calibrated
	// one); with --review-below, whether the answer is marked for review;
	// with --cascade, the stage that answered.
	RawScore *float64 `json:"raw_score,omitempty"`
	Review   *bool    `json:"review,omitempty"`
	Stage    *int     `json:"stage,omitempty"`
	// With --top-k or --multi-label, the labels the answer scored (the
	// results' scores column); for a chat model, the part of the prompt
	// the server read from its prompt cache (cached_prompt_tokens).
	Scores             []results.JSONScore `json:"scores,omitempty"`
	CachedPromptTokens *int                `json:"cached_prompt_tokens,omitempty"`
}

// columns fills what the run's later results columns add to an answer:
// scores (--top-k, --multi-label: the first --top-k of them, as the CSV
// writes) and cached_prompt_tokens (a chat model's, when it reported
// usage).
func (s *Server) columns(r results.Row, scores *[]results.JSONScore, cached **int) {
	if s.cfg.Extra.Scores {
		*scores = results.JSONScores(r.Scores, s.cfg.Extra.TopK)
	}
	if s.cfg.Extra.CachedTokens && r.Tokens {
		v := r.CachedPromptTokens
		*cached = &v
	}
}

// quality fills what --calibration, --review-below and --cascade add to an
// answer.
func (s *Server) quality(r results.Row, raw **float64, review **bool, stage **int) {
	calibrated, reviewed := s.cfg.Pipeline.Marks()
	if calibrated && r.Label != "" && !math.IsNaN(r.RawScore) {
		v := results.RoundScore(r.RawScore)
		*raw = &v
	}
	if reviewed {
		v := r.Review
		*review = &v
	}
	if s.cfg.Stage && r.Stage > 0 {
		v := r.Stage
		*stage = &v
	}
}

// score is a row's score as answered: rounded, nil when it has none.
func score(r results.Row) *float64 {
	if math.IsNaN(r.Score) {
		return nil
	}
	sc := results.RoundScore(r.Score)
	return &sc
}

type classifyResponse struct {
	Results []itemResult `json:"results"`
}

// itemResult is a results CSV row as JSON (without the run's timing
// columns), with when to try again for a 503.
type itemResult struct {
	RequestID  string   `json:"request_id"`
	Status     int      `json:"status"`
	Outcome    string   `json:"outcome"`
	Label      *string  `json:"label"`
	Score      *float64 `json:"score"`
	Model      *string  `json:"model"`
	Attempts   int      `json:"attempts"`
	LatencyMs  *int64   `json:"latency_ms"`
	Error      *string  `json:"error"`
	RetryAfter *int     `json:"retry_after"`
	RawScore   *float64 `json:"raw_score,omitempty"`
	Review     *bool    `json:"review,omitempty"`
	Stage      *int     `json:"stage,omitempty"`
	// As feedbackResponse's.
	Scores             []results.JSONScore `json:"scores,omitempty"`
	CachedPromptTokens *int                `json:"cached_prompt_tokens,omitempty"`
}

// feedback answers POST /feedback-sentiment.
func (s *Server) feedback(x *exchange) {
	b := s.openBody(x)
	if b == nil {
		return
	}
	defer b.done()
	var req textRequest
	field, msg := decodeStrict(b, &req)
	b.decoded()
	if msg != "" || b.err != nil {
		s.failed(x, b, field, msg)
		return
	}
	x.requestID = limit(req.RequestID, 200)
	row := input.Row{ID: req.RequestID, Text: req.Text}
	if problem := s.rules.Check(row, nil); problem != "" {
		s.invalid(x, fieldOf(problem), problem)
		return
	}
	res := s.classify(x, row)
	x.attempts = res.Attempts
	s.m.outcome(x.route, res.Outcome)
	if !res.Outcome.OK() {
		s.outcomeError(x, res)
		return
	}
	x.code = string(res.Outcome)
	resp := feedbackResponse{RequestID: req.RequestID, Label: res.Label, Score: score(res), Model: res.Model}
	s.quality(res, &resp.RawScore, &resp.Review, &resp.Stage)
	s.columns(res, &resp.Scores, &resp.CachedPromptTokens)
	x.json(http.StatusOK, resp)
}

// classifyItems answers POST /v1/classify: one result per item, in order,
// each with its own outcome. An item the rules refuse is invalid_input
// there, like a CSV row; the others are still classified. Items submitted
// together ride in one provider call when --batch-size allows.
func (s *Server) classifyItems(x *exchange) {
	b := s.openBody(x)
	if b == nil {
		return
	}
	defer b.done()
	items, count, found, field, msg := decodeItems(b, s.cfg.MaxItems)
	b.decoded()
	switch {
	case msg != "" || b.err != nil:
		s.failed(x, b, field, msg)
		return
	case !found:
		s.invalid(x, "items", "missing: want a list of {\"request_id\", \"text\"}")
		return
	case count == 0:
		s.invalid(x, "items", "empty: want at least one item")
		return
	case count > s.cfg.MaxItems:
		s.invalid(x, "items", fmt.Sprintf("%d items, over --max-items %d", count, s.cfg.MaxItems))
		return
	}
	x.items = len(items)
	out := make([]results.Row, len(items))
	seen := make(map[string]bool, len(items))
	// The items are admitted as one: the request gets its place within the
	// admission wait, or is refused whole.
	group := engine.NewGroup()
	var wg sync.WaitGroup
	for i, it := range items {
		field, msg := it.field, it.msg
		if msg == "" {
			problem := s.rules.Check(input.Row{ID: it.RequestID, Text: it.Text}, func(id string) bool {
				dup := seen[id]
				seen[id] = true
				return dup
			})
			field, msg = fieldOf(problem), problem
		}
		if msg != "" {
			out[i] = results.Row{RequestID: it.RequestID, Outcome: outcome.InvalidInput, StartedMs: -1,
				Error: fmt.Sprintf("items[%d].%s: %s", i, field, msg)}
			continue
		}
		wg.Add(1)
		if !s.send(x, group, input.Row{Seq: int64(i), ID: it.RequestID, Text: it.Text}, func(r results.Row) {
			out[i] = r
			wg.Done()
		}) {
			out[i] = notSent()
			out[i].RequestID = it.RequestID
			wg.Done()
		}
	}
	wg.Wait()
	if refusal, refused := group.Refused(); refused {
		// No slot within the admission wait: the whole request is refused,
		// none of it sent, with when to try again.
		for range out {
			s.m.outcome(x.route, refusal.Outcome)
		}
		x.outcomes = countsText(map[outcome.Code]int{refusal.Outcome: len(out)})
		s.outcomeError(x, refusal)
		return
	}
	resp := classifyResponse{Results: make([]itemResult, len(out))}
	counts := map[outcome.Code]int{}
	for i, r := range out {
		counts[r.Outcome]++
		s.m.outcome(x.route, r.Outcome)
		resp.Results[i] = s.item(r)
	}
	x.outcomes = countsText(counts)
	x.json(http.StatusOK, resp)
}

// item is a result as the caller sees it; its request id is the one the
// item gave (the pipeline's results carry it, as do the rows built here).
func (s *Server) item(r results.Row) itemResult {
	it := itemResult{RequestID: r.RequestID, Status: r.Status(), Outcome: string(r.Outcome), Attempts: r.Attempts}
	s.quality(r, &it.RawScore, &it.Review, &it.Stage)
	s.columns(r, &it.Scores, &it.CachedPromptTokens)
	if r.Label != "" {
		l := r.Label
		it.Label, it.Score = &l, score(r)
	}
	if r.Model != "" {
		m := r.Model
		it.Model = &m
	}
	if r.StartedMs >= 0 {
		l := r.LatencyMs
		it.LatencyMs = &l
	}
	if !r.Outcome.OK() {
		msg := message(r)
		it.Error = &msg
	}
	if it.Status == http.StatusServiceUnavailable {
		ra := s.retryAfter(r)
		it.RetryAfter = &ra
	}
	return it
}

func countsText(counts map[outcome.Code]int) string {
	keys := make([]string, 0, len(counts))
	for c, n := range counts {
		keys = append(keys, string(c)+"="+strconv.Itoa(n))
	}
	sort.Strings(keys)
	return strings.Join(keys, " ")
}

func (s *Server) healthz(x *exchange) {
	x.json(http.StatusOK, map[string]string{"status": "ok"})
}

// ReasonNoBudgetShare is /readyz's reason while a budget member has
// nothing to send on.
const ReasonNoBudgetShare = "no_budget_share"

// readyz is 503 while draining, and while the breaker is open with no
// fallback to answer meanwhile: a load balancer sends traffic elsewhere.
func (s *Server) readyz(x *exchange) {
	ok, reason, retry := s.Ready()
	if ok {
		x.json(http.StatusOK, map[string]string{"status": "ready"})
		return
	}
	x.w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(retry)))
	msg := "the server is stopping"
	switch reason {
	case string(outcome.CircuitOpen):
		msg = "the provider is failing (circuit breaker open) and there is no --fallback-model"
	case ReasonNoBudgetShare:
		msg = "no share of the fleet budget (--budget) to send on: its database cannot be reached and it has no safe share (--budget-safe-share, --budget-safe-for)"
	}
	x.fail(http.StatusServiceUnavailable, reason, msg, "")
}

func (s *Server) metrics(x *exchange) {
	sw := &statusWriter{ResponseWriter: x.w, status: http.StatusOK}
	s.m.Handler().ServeHTTP(sw, x.r)
	x.status = sw.status
}

func (s *Server) openAPI(x *exchange) { x.write(http.StatusOK, s.openapi) }

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// describe turns a decoding error into the field at fault and a message
// that quotes nothing of the body but a field name.
func describe(err error) (field, msg string) {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "body", "empty: want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "body", "the JSON ends too soon"
	case errors.As(err, &syn):
		return "body", fmt.Sprintf("not valid JSON (at byte %d)", syn.Offset)
	case errors.As(err, &typ):
		want := "a " + typ.Type.Kind().String()
		switch typ.Type.Kind() {
		case reflect.Struct, reflect.Map:
			want = "an object"
		case reflect.Slice:
			want = "an array"
		}
		if typ.Field == "" {
			return "body", fmt.Sprintf("want a JSON object, got %s", typ.Value)
		}
		return typ.Field, fmt.Sprintf("want %s, got %s", want, typ.Value)
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		name, _ = strconv.Unquote(name)
		return limit(name, 64), "unknown field"
	}
	return "body", "not a valid JSON object"
}

// fieldOf names the field a problem from engine.Rules is about.
func fieldOf(problem string) string {
	if problem == "" {
		return ""
	}
	if strings.Contains(problem, "request id") {
		return "request_id"
	}
	return "text"
}
