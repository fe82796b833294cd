package serve

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// Route paths.
const (
	PathFeedback = "/feedback-sentiment"
	PathClassify = "/v1/classify"
	PathHealthz  = "/healthz"
	PathReadyz   = "/readyz"
	PathMetrics  = "/metrics"
	PathOpenAPI  = "/openapi.json"
)

// Error codes the server answers besides the outcome codes (which come
// from the outcome table, with its statuses).
const (
	CodeBadRequest       = "bad_request"            // 400: the body could not be read
	CodeNotFound         = "not_found"              // 404: no such route
	CodeMethodNotAllowed = "method_not_allowed"     // 405, with Allow
	CodeTooLarge         = "request_too_large"      // 413: body over --max-body
	CodeMediaType        = "unsupported_media_type" // 415: Content-Type not JSON
	CodeInternal         = "internal_error"         // 500: a bug; see the server log
)

type route struct {
	path    string
	methods []string // HEAD is allowed wherever GET is
	quiet   bool     // probes and scrapes: logged at debug level
	h       func(*exchange)
}

func (s *Server) routeTable() map[string]*route {
	rs := []*route{
		{path: PathFeedback, methods: []string{http.MethodPost}, h: s.feedback},
		{path: PathClassify, methods: []string{http.MethodPost}, h: s.classifyItems},
		{path: PathHealthz, methods: []string{http.MethodGet}, quiet: true, h: s.healthz},
		{path: PathReadyz, methods: []string{http.MethodGet}, quiet: true, h: s.readyz},
		{path: PathMetrics, methods: []string{http.MethodGet}, quiet: true, h: s.metrics},
		{path: PathOpenAPI, methods: []string{http.MethodGet}, quiet: true, h: s.openAPI},
	}
	m := make(map[string]*route, len(rs))
	for _, r := range rs {
		m[r.path] = r
	}
	return m
}

// Routes lists every path the server answers and its methods.
func (s *Server) Routes() map[string][]string {
	out := make(map[string][]string, len(s.routes))
	for p, r := range s.routes {
		out[p] = slices.Clone(r.methods)
	}
	return out
}

func (r *route) allows(method string) bool {
	if slices.Contains(r.methods, method) {
		return true
	}
	return method == http.MethodHead && slices.Contains(r.methods, http.MethodGet)
}

func (r *route) allow() string {
	m := slices.Clone(r.methods)
	if slices.Contains(m, http.MethodGet) {
		m = append(m, http.MethodHead)
	}
	return strings.Join(m, ", ")
}

// exchange is one request on its way to its answer, and what the access
// log and the metrics say about it.
type exchange struct {
	w     http.ResponseWriter
	r     *http.Request
	start time.Time
	route string // the metrics label: a route's path, or "other"

	status    int
	code      string // outcome or error code; "" for a plain 200
	requestID string
	attempts  int
	items     int
	outcomes  string // /v1/classify: counts by outcome
}

// ServeHTTP routes a request, and records it (metrics, access log) however
// it ends, a panic included.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &exchange{w: w, r: r, start: time.Now(), route: "other"}
	rt := s.routes[r.URL.Path]
	if rt != nil {
		x.route = rt.path
	}
	s.m.inFlight.Inc()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			// The text is not logged: only where it broke.
			s.log.Error("internal error while answering a request", "route", x.route,
				"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if x.status == 0 {
				x.fail(http.StatusInternalServerError, CodeInternal, "internal error (see the server log)", "")
			}
			x.code = CodeInternal
		}
		s.m.inFlight.Dec()
		s.record(x, rt)
	}()
	switch {
	case rt == nil:
		x.fail(http.StatusNotFound, CodeNotFound, "no route "+strconv.Quote(limit(r.URL.Path, 100))+"; see /openapi.json", "")
	case !rt.allows(r.Method):
		w.Header().Set("Allow", rt.allow())
		x.fail(http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed here; allowed: "+rt.allow(), "")
	default:
		rt.h(x)
	}
}

// record counts the request and writes its access log line: never the
// text, never a header.
func (s *Server) record(x *exchange, rt *route) {
	d := time.Since(x.start)
	if x.status == 0 {
		x.status = http.StatusOK
	}
	s.m.request(x.route, x.status, d)
	level := slog.LevelInfo
	if rt != nil && rt.quiet && x.status < 500 {
		level = slog.LevelDebug
	}
	ctx := x.r.Context()
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 9)
	attrs = append(attrs, slog.String("method", x.r.Method), slog.String("route", x.route), slog.Int("status", x.status))
	if x.requestID != "" {
		attrs = append(attrs, slog.String("request_id", x.requestID))
	}
	if x.code != "" {
		attrs = append(attrs, slog.String("outcome", x.code))
	}
	if x.items > 0 {
		attrs = append(attrs, slog.Int("items", x.items), slog.String("outcomes", x.outcomes))
	} else if x.attempts > 0 {
		attrs = append(attrs, slog.Int("attempts", x.attempts))
	}
	attrs = append(attrs, slog.Float64("duration_ms", float64(d.Microseconds())/1000), slog.String("remote", x.r.RemoteAddr))
	s.log.LogAttrs(ctx, level, "request", attrs...)
}

// refused records a request net/http refused by itself (see refusalConn):
// counted and logged like the others, on the route "other".
func (s *Server) refused(status int, code string, remote net.Addr) {
	s.m.request("other", status, 0)
	s.log.Info("request", "route", "other", "status", status, "outcome", code, "remote", remote.String())
}

// errorBody is every error answer: {"detail": {"code", "message"}}, and the
// field at fault for a 422.
type errorBody struct {
	Detail errorDetail `json:"detail"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (x *exchange) json(status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only plain structs of strings and numbers are written here.
		panic(fmt.Sprintf("encoding an answer: %v", err))
	}
	x.write(status, append(b, '\n'))
}

// write answers status with the JSON document b (headers only for HEAD).
func (x *exchange) write(status int, b []byte) {
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	x.w.WriteHeader(status)
	x.status = status
	if x.r.Method != http.MethodHead {
		_, _ = x.w.Write(b)
	}
}

// fail answers an error that is not a text's outcome.
func (x *exchange) fail(status int, code, msg, field string) {
	x.code = code
	x.json(status, errorBody{errorDetail{Code: code, Message: msg, Field: field}})
}

// invalid answers 422 for a request body the rules refuse.
func (s *Server) invalid(x *exchange, field, msg string) {
	s.m.outcome(x.route, outcome.InvalidInput)
	x.fail(http.StatusUnprocessableEntity, string(outcome.InvalidInput), msg, field)
}

// message is a result's safe text for a caller.
func message(res results.Row) string {
	if res.Error == "" {
		return string(res.Outcome)
	}
	return res.Error
}

// retryAfter is when a caller may try again after res, in whole seconds,
// never below 1: what the provider asked for, the breaker's remaining open
// time, the cooldown after a 429, or about one call's latency when the
// slots were full.
func (s *Server) retryAfter(res results.Row) int {
	d := res.RetryAfter
	switch res.Outcome {
	case outcome.LocalCapacity, outcome.UpstreamRateLimited:
		d = max(d, s.cooldown())
	case outcome.CircuitOpen:
		if d <= 0 {
			_, d = s.breakerOpen()
		}
	}
	return retrySeconds(d)
}

// retrySeconds is d as a Retry-After: whole seconds rounded up, at least 1,
// at most a day.
func retrySeconds(d time.Duration) int {
	secs := math.Ceil(d.Seconds())
	if secs < 1 || math.IsNaN(secs) {
		return 1
	}
	return int(min(secs, 86400))
}

// outcomeError answers a text that did not get a label, with its status
// from the outcome table, and Retry-After on a 503.
func (s *Server) outcomeError(x *exchange, res results.Row) {
	status := res.Status()
	if status == http.StatusServiceUnavailable {
		x.w.Header().Set("Retry-After", strconv.Itoa(s.retryAfter(res)))
	}
	x.code = string(res.Outcome)
	x.json(status, errorBody{errorDetail{Code: string(res.Outcome), Message: message(res)}})
}

// limit cuts s to at most n bytes, on a rune boundary, for messages that
// quote what a caller sent.
func limit(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
