package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/results"
)

// testToken is planted in the client: it must never reach a caller or a log.
const testToken = "hf_TOKENSECRET4242"

// setup is what a test server is built from: the same pieces `hfsent serve`
// assembles (the HF client on the fake, the policies, the pipeline), with
// serve's defaults unless a test changes them.
type setup struct {
	res  resilience.Config
	cfg  Config
	wrap func(provider.Classifier) provider.Classifier // around the HF client, inside the policies
	// cacheDir, when set, is a response cache for the pipeline.
	cacheDir string
	// fallback, when set, is a second stage the rows go on to when the
	// provider fails them (what --fallback-model builds).
	fallback provider.Classifier
	// topK, when set, asks the model for its topK best labels (--top-k):
	// the answers carry them as scores.
	topK int
}

func defaults() *setup {
	return &setup{
		res: resilience.Config{Retries: DefaultRetries, Concurrency: 8, Timeout: 5 * time.Second},
		cfg: Config{
			Pipeline:       engine.Config{AdmissionWait: DefaultAdmissionWait, Dedupe: true, ShedStandingQueue: true},
			RequestTimeout: DefaultRequestTimeout,
			Grace:          DefaultGrace,
		},
	}
}

// harness is a server on loopback in front of a fake provider.
type harness struct {
	t        *testing.T
	fake     *fakehf.Fake
	provider *httptest.Server
	s        *Server
	url      string
	addr     string
	client   *http.Client
	logs     *syncBuffer
	stop     context.CancelFunc
	ran      chan error
}

func start(t *testing.T, f *fakehf.Fake, tune ...func(*setup)) *harness {
	t.Helper()
	st := defaults()
	for _, fn := range tune {
		fn(st)
	}
	h := &harness{t: t, fake: f, logs: &syncBuffer{}}
	f.Token = testToken
	h.provider = fakehf.Start(f)
	t.Cleanup(h.provider.Close)
	hf, err := provider.NewHF(provider.HFConfig{Endpoint: h.provider.URL + "/models/{model}", Token: testToken,
		Concurrency: st.res.Concurrency, Timeout: st.res.Timeout, ConnectTimeout: time.Second, TopK: st.topK})
	if err != nil {
		t.Fatal(err)
	}
	var client provider.Classifier = hf
	if st.wrap != nil {
		client = st.wrap(hf)
	}
	if st.topK > 0 {
		st.cfg.Extra = results.Extra{Scores: true, TopK: st.topK}
	}
	counters := &resilience.Counters{}
	m := NewMetrics(counters)
	st.res.Counters = counters
	log := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st.res.Logger = log
	st.cfg.Logger = log
	if st.cacheDir != "" {
		f, err := cache.OpenFile(context.Background(), st.cacheDir, 0)
		if err != nil {
			t.Fatal(err)
		}
		c := cache.New(f, cache.Options{})
		t.Cleanup(func() { c.Close(context.Background()) })
		k, _ := cache.NewKeyer("hf", hf)
		st.cfg.Pipeline.Cache, st.cfg.Pipeline.Keys = c, &k
	}
	if st.fallback != nil {
		st.res.Escalates = true
		st.cfg.Pipeline.Stages = []engine.Stage{{Keys: st.cfg.Pipeline.Keys},
			{Guard: resilience.Build(st.fallback, resilience.Config{Plain: true, Concurrency: st.res.Concurrency})}}
	}
	h.s = New(resilience.Build(client, st.res), m, st.cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	h.url = "http://" + h.addr
	ctx, cancel := context.WithCancel(context.Background())
	h.stop, h.ran = cancel, make(chan error, 1)
	go func() { h.ran <- h.s.Run(ctx, ln) }()
	h.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	t.Cleanup(func() {
		h.shutdown()
		h.client.CloseIdleConnections()
		if strings.Contains(h.logs.String(), testToken) {
			t.Errorf("the token reached the log")
		}
	})
	return h
}

// shutdown stops the server (as SIGTERM does) and waits for Run to end.
func (h *harness) shutdown() error {
	h.stop()
	select {
	case err := <-h.ran:
		h.ran <- err // for a second call
		return err
	case <-time.After(60 * time.Second):
		h.t.Fatal("the server did not stop within 60s")
		return nil
	}
}

// answer is an HTTP answer as a caller sees it.
type answer struct {
	status int
	header http.Header
	body   []byte
	err    error
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer %d is not a JSON object: %v\n%s", a.status, err, a.body)
	}
	return m
}

// detail is an error answer's detail object.
func (a answer) detail(t *testing.T) map[string]any {
	t.Helper()
	d, ok := a.json(t)["detail"].(map[string]any)
	if !ok {
		t.Fatalf("answer %d has no detail object: %s", a.status, a.body)
	}
	return d
}

func (a answer) code(t *testing.T) string {
	t.Helper()
	c, _ := a.detail(t)["code"].(string)
	return c
}

func (h *harness) do(ctx context.Context, method, path, contentType string, body []byte) answer {
	req, err := http.NewRequestWithContext(ctx, method, h.url+path, bytes.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

func (h *harness) post(path string, v any) answer {
	b, err := json.Marshal(v)
	if err != nil {
		h.t.Fatal(err)
	}
	return h.do(context.Background(), http.MethodPost, path, "application/json", b)
}

func (h *harness) feedback(id, text string) answer {
	return h.post(PathFeedback, map[string]string{"request_id": id, "text": text})
}

func (h *harness) get(path string) answer {
	return h.do(context.Background(), http.MethodGet, path, "", nil)
}

// metrics scrapes /metrics with Prometheus's own parser.
func (h *harness) metrics() map[string]*metricFamily {
	h.t.Helper()
	a := h.get(PathMetrics)
	if a.status != http.StatusOK {
		h.t.Fatalf("/metrics answered %d", a.status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(a.body))
	if err != nil {
		h.t.Fatalf("/metrics is not the Prometheus text format: %v", err)
	}
	out := map[string]*metricFamily{}
	for name, f := range fams {
		out[name] = &metricFamily{f}
	}
	return out
}

// value is the value of the series of name whose labels include labels
// (pairs); -1 when there is none.
func (h *harness) value(fams map[string]*metricFamily, name string, labels ...string) float64 {
	h.t.Helper()
	f, ok := fams[name]
	if !ok {
		h.t.Fatalf("/metrics has no %s", name)
	}
	return f.value(labels...)
}

// waitFor polls cond for up to 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// gate holds the fake's calls until it is opened (or 20s pass).
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

func (g *gate) wait(r *http.Request) {
	select {
	case <-g.ch:
	case <-r.Context().Done():
	case <-time.After(20 * time.Second):
	}
}

// retryAfter is the Retry-After header in seconds, or -1.
func retryAfter(a answer) int {
	n, err := strconv.Atoi(a.header.Get("Retry-After"))
	if err != nil {
		return -1
	}
	return n
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lines are the JSON log records whose msg is msg.
func (s *syncBuffer) records(msg string) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(s.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func uniq(i int) string { return fmt.Sprintf("review number %d is fine", i) }

// metricFamily is a parsed family from /metrics.
type metricFamily struct{ f *dto.MetricFamily }

func (m *metricFamily) value(labels ...string) float64 {
	total, found := 0.0, false
	for _, s := range m.f.GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		found = true
		switch {
		case s.Counter != nil:
			total += s.GetCounter().GetValue()
		case s.Gauge != nil:
			total += s.GetGauge().GetValue()
		case s.Histogram != nil:
			total += float64(s.GetHistogram().GetSampleCount())
		case s.Untyped != nil:
			total += s.GetUntyped().GetValue()
		}
	}
	if !found {
		return -1
	}
	return total
}

func hasLabels(s *dto.Metric, pairs []string) bool {
	for i := 0; i+1 < len(pairs); i += 2 {
		ok := false
		for _, l := range s.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
