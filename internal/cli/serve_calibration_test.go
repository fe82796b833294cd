package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/fakehf"
)

// liveServe is `hfsent serve` run in this process as Main runs it, but
// under a context the test cancels: Main's is Background, and serve would
// stop only on a SIGTERM to the whole test binary.
type liveServe struct {
	addr   string // "" when serve ended before listening
	stderr *lockedBuffer
	code   chan int
}

var listeningAddrRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startServeMain runs `hfsent serve --addr 127.0.0.1:0 ARGS` with injected
// streams and env (HF_TOKEN set) and waits until it listens or exits. The
// test's cleanup drains it (the context's end is serve's SIGTERM) and
// checks that it exited 0.
func startServeMain(t *testing.T, args ...string) *liveServe {
	t.Helper()
	// GOMEMLIMIT given: serve leaves the test binary's memory limit alone
	// (it sets one only when the operator has not).
	env := map[string]string{"HF_TOKEN": token, "GOMEMLIMIT": "off"}
	s := &liveServe{stderr: &lockedBuffer{}, code: make(chan int, 1)}
	home := t.TempDir()
	ios := &IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: s.stderr,
		Getenv: func(k string) string {
			if k == "HOME" {
				return home // no token file, no cache by accident
			}
			return env[k]
		},
		HardExit: func(code int) { t.Errorf("hard exit %d", code) },
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { s.code <- mainContext(ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...), ios) }()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if m := listeningAddrRE.FindStringSubmatch(s.stderr.String()); m != nil {
			s.addr = m[1]
			t.Cleanup(func() {
				cancel()
				if code := s.wait(t); code != 0 {
					t.Errorf("serve drained with exit %d\n%s", code, s.stderr.String())
				}
			})
			return s
		}
		select {
		case c := <-s.code:
			s.code <- c
			cancel()
			return s
		default:
		}
	}
	cancel()
	t.Fatalf("serve neither listened nor exited within 30s:\n%s", s.stderr.String())
	return nil
}

// wait is serve's exit code, once it has ended.
func (s *liveServe) wait(t *testing.T) int {
	t.Helper()
	select {
	case c := <-s.code:
		return c
	case <-time.After(30 * time.Second):
		t.Fatalf("serve still running 30s after its context ended:\n%s", s.stderr.String())
		return -1
	}
}

// post sends body to path and decodes the JSON answer into out.
func (s *liveServe) post(t *testing.T, path string, body any, out any) {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post("http://"+s.addr+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: status %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
}

// calFitResults are the results of a run of the scripted fake (no label
// map), with calFitGold its gold labels. By hand, isotonic-shrunk
// (calibration.Fit) makes of them one pooled map (8 rows: under
// MinLabelRows for a label of its own):
//
//	score 0.5: 4 rows, 0 right;  score 0.9: 4 rows, 1 right (increasing: no pooling)
//	prior p = (1+1)/(8+2) = 0.2, m = 10 rows
//	0.5 -> (0 + 10·0.2)/(4+10) = 1/7;  0.9 -> (1 + 2)/(4+10) = 3/14
//
// so the model's 0.9 means a 21% chance of being right.
const (
	calFitResults = "request_id,status,label,score,outcome,model,attempts,latency_ms,error,queued_ms,started_ms,finished_ms\n" +
		"a,200,LABEL_1,0.5,success,m,1,1,,0,0,1\nb,200,LABEL_1,0.5,success,m,1,1,,0,0,1\n" +
		"c,200,LABEL_1,0.5,success,m,1,1,,0,0,1\nd,200,LABEL_1,0.5,success,m,1,1,,0,0,1\n" +
		"e,200,LABEL_1,0.9,success,m,1,1,,0,0,1\nf,200,LABEL_1,0.9,success,m,1,1,,0,0,1\n" +
		"g,200,LABEL_1,0.9,success,m,1,1,,0,0,1\nh,200,LABEL_1,0.9,success,m,1,1,,0,0,1\n"
	calFitGold = "request_id,gold\na,LABEL_0\nb,LABEL_0\nc,LABEL_0\nd,LABEL_0\ne,LABEL_1\nf,LABEL_0\ng,LABEL_0\nh,LABEL_0\n"
)

// fitServeCalibration fits, with hfsent calibrate, the calibration above
// for the run the provider flags describe, and checks its map is the one
// worked out by hand.
func fitServeCalibration(t *testing.T, prov ...string) string {
	t.Helper()
	res, gold := writeFile(t, "res.csv", calFitResults), writeFile(t, "gold.csv", calFitGold)
	cal := filepath.Join(t.TempDir(), "cal.json")
	if r := runMain(t, nil, "", append([]string{"calibrate", res, "--gold", gold, "-o", cal}, prov...)...); r.code != 0 {
		t.Fatalf("calibrate: exit %d\n%s", r.code, r.stderr)
	}
	b, err := os.ReadFile(cal)
	if err != nil {
		t.Fatal(err)
	}
	f, err := calibration.Read(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	pts := f.Pooled.Points
	if len(f.Labels) != 0 || len(pts) != 2 || !near(pts[0][0], 0.5) || !near(pts[0][1], 1.0/7) || !near(pts[1][0], 0.9) || !near(pts[1][1], 3.0/14) {
		t.Fatalf("the fit is not the map worked out by hand (pooled [[0.5, 1/7], [0.9, 3/14]]):\n%s", b)
	}
	return cal
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// serveAnswer is what serve answers a text with, on either route.
type serveAnswer struct {
	RequestID string   `json:"request_id"`
	Label     string   `json:"label"`
	Score     *float64 `json:"score"`
	RawScore  *float64 `json:"raw_score"`
}

// calText is a text the scripted fake answers with the label and raw
// score it names, and want the score --calibration makes of that raw one.
type calText struct {
	id, text  string
	label     string
	raw, want float64
}

// calTexts' wants are worked out by hand from the map [[0.5, 1/7],
// [0.9, 3/14]] (fitServeCalibration): linear between the points, the end
// value beyond them.
var calTexts = []calText{
	{"fb", "LABEL_1 0.90 fb", "LABEL_1", 0.9, 3.0 / 14},                             // at a point: 0.2143
	{"s1", "LABEL_1 0.90 s1", "LABEL_1", 0.9, 3.0 / 14},                             // the same, by the other route
	{"s2", "LABEL_0 0.70 s2", "LABEL_0", 0.7, 1.0/7 + (3.0/14-1.0/7)*(0.7-0.5)/0.4}, // halfway: 5/28, 0.1786
	{"s3", "LABEL_1 0.99 s3", "LABEL_1", 0.99, 3.0 / 14},                            // past the last point: its value
}

// serve --calibration FILE, one stage (no --cascade): each text is
// answered, on both routes, with the calibrated score worked out by hand
// from the file's map (not the model's raw one, which raw_score keeps),
// the same score classify --calibration writes for it.
func TestServeCalibratedScores(t *testing.T) {
	srv := fakehf.Start(scripted(t))
	defer srv.Close()
	cal := fitServeCalibration(t, "--endpoint", srv.URL)
	s := startServeMain(t, "--endpoint", srv.URL, "--retries", "0", "--no-cache", "--calibration", cal)
	if s.addr == "" {
		t.Fatalf("serve did not start: exit %d\n%s", s.wait(t), s.stderr.String())
	}
	// The first text by /feedback-sentiment, the others by /v1/classify.
	type answered struct {
		route string
		c     calText
		a     serveAnswer
	}
	var one serveAnswer
	s.post(t, "/feedback-sentiment", map[string]string{"request_id": calTexts[0].id, "text": calTexts[0].text}, &one)
	got := []answered{{"/feedback-sentiment", calTexts[0], one}}
	var items struct{ Results []serveAnswer }
	var req []map[string]string
	for _, c := range calTexts[1:] {
		req = append(req, map[string]string{"request_id": c.id, "text": c.text})
	}
	s.post(t, "/v1/classify", map[string]any{"items": req}, &items)
	if len(items.Results) != len(req) {
		t.Fatalf("/v1/classify: %d results for %d items", len(items.Results), len(req))
	}
	for i, c := range calTexts[1:] {
		got = append(got, answered{"/v1/classify", c, items.Results[i]})
	}
	classified := classifyCalibrated(t, srv.URL, cal)
	for _, g := range got {
		c, a := g.c, g.a
		if a.RequestID != c.id || a.Label != c.label || a.Score == nil {
			t.Fatalf("%s %s: %s label %q score %s, want label %s with a score", g.route, c.id, a.RequestID, a.Label, showScore(a.Score), c.label)
		}
		if *a.Score != round4(c.want) {
			t.Errorf("%s %s: score %v, want the calibrated %v (the model's is %v)", g.route, c.id, *a.Score, round4(c.want), c.raw)
		}
		if a.RawScore == nil || *a.RawScore != c.raw {
			t.Errorf("%s %s: raw_score %s, want the model's %v", g.route, c.id, showScore(a.RawScore), c.raw)
		}
		if w := classified[c.id]; w != *a.Score {
			t.Errorf("%s %s: serve's score %v, classify --calibration's %v", g.route, c.id, *a.Score, w)
		}
	}
}

func round4(f float64) float64 { return math.Round(f*1e4) / 1e4 }

// showScore is a score as answered: absent, or its value.
func showScore(p *float64) string {
	if p == nil {
		return "absent"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}

// classifyCalibrated is the score classify --calibration writes for each
// of calTexts, by request id.
func classifyCalibrated(t *testing.T, url, cal string) map[string]float64 {
	t.Helper()
	var in strings.Builder
	in.WriteString("request_id,text\n")
	for _, c := range calTexts {
		in.WriteString(c.id + "," + c.text + "\n")
	}
	out := filepath.Join(t.TempDir(), "out.csv")
	r := runMain(t, map[string]string{"HF_TOKEN": token}, "", "classify", writeFile(t, "in.csv", in.String()),
		"--endpoint", url, "--retries", "0", "--no-cache", "--calibration", cal, "-o", out)
	if r.code != 0 {
		t.Fatalf("classify --calibration: exit %d\n%s", r.code, r.stderr)
	}
	b, _ := os.ReadFile(out)
	scores := map[string]float64{}
	for _, row := range parseResults(t, string(b)) {
		v, err := strconv.ParseFloat(row["score"], 64)
		if err != nil {
			t.Fatalf("classify row %v", row)
		}
		scores[row["request_id"]] = v
	}
	return scores
}

// serve refuses, at start (exit 2, before it listens or sends a call), a
// calibration fitted for another model or another label set, naming the
// file and the flag.
func TestServeRefusesCalibrationOfAnotherRun(t *testing.T) {
	f := &fakehf.Fake{}
	srv := fakehf.Start(f)
	defer srv.Close()
	for _, c := range []struct {
		what       string
		fitted     []string // the run the calibration was fitted for
		serve      []string // serve's own
		wantDiffer string
	}{
		{"another model", []string{"--model", "acme/other-model"}, nil, `model "acme/other-model", this run "distilbert/distilbert-base-uncased-finetuned-sst-2-english"`},
		{"another label set", []string{"--labels", "good,bad"}, []string{"--labels", "good,bad,meh"}, `labels "good,bad", this run "good,bad,meh"`},
	} {
		t.Run(c.what, func(t *testing.T) {
			cal := fitServeCalibration(t, append([]string{"--endpoint", srv.URL}, c.fitted...)...)
			s := startServeMain(t, append([]string{"--endpoint", srv.URL, "--no-cache", "--calibration", cal}, c.serve...)...)
			if s.addr != "" {
				t.Fatalf("serve listened with a calibration fitted for %s:\n%s", c.what, s.stderr.String())
			}
			code, stderr := s.wait(t), s.stderr.String()
			for _, want := range []string{"--calibration " + cal + " was fitted for another run", c.wantDiffer, "--calibration-force"} {
				if code != ExitUsage || !strings.Contains(stderr, want) {
					t.Errorf("exit %d, want 2 and %q\n%s", code, want, stderr)
				}
			}
		})
	}
	if f.Calls() != 0 {
		t.Fatalf("%d calls reached the provider", f.Calls())
	}
}
