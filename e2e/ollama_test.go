//go:build unix

package e2e

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ollamaEnv names the directory of a real Ollama built by the shared setup
// script (bin/ollama, the models it serves in model/ and models/): these
// tests run the binary against it. Without it they skip, saying so; .ci/run
// builds it and sets the variable, so CI fails rather than skip.
const ollamaEnv = "HFSENT_TEST_OLLAMA"

// ollamaPortsEnv, when set ("11563-11569"), bounds the ports the tests'
// servers listen on (a shared machine); else the system picks free ones.
const ollamaPortsEnv = "HFSENT_TEST_OLLAMA_PORTS"

// ollama is one `ollama serve` a test started, with its own settings.
type ollama struct {
	url string // http://127.0.0.1:PORT
	log string // its log file
}

// chat is its OpenAI-compatible route.
func (o ollama) chat() string { return o.url + "/v1/chat/completions" }

// startOllama serves the Ollama of $HFSENT_TEST_OLLAMA on a free port with
// env (OLLAMA_MAX_QUEUE=2, ...), with the models tiny (random weights) and
// tiny-label (one label chosen by the text's last byte, 512-token
// context), until the test ends.
func startOllama(t *testing.T, env ...string) ollama {
	t.Helper()
	dir := os.Getenv(ollamaEnv)
	if dir == "" {
		t.Skipf("no Ollama for this test: set %s to the directory the shared ollama/setup.sh builds (default /tmp/hfsent-ollama; .ci/run sets it up)", ollamaEnv)
	}
	bin := filepath.Join(dir, "bin", "ollama")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s but %s is missing: run the shared ollama/setup.sh", ollamaEnv, dir, bin)
	}
	port := freePort(t)
	o := ollama{url: "http://127.0.0.1:" + port, log: filepath.Join(t.TempDir(), "ollama.log")}
	logf, err := os.Create(o.log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "OLLAMA_HOST=127.0.0.1:" + port,
		"OLLAMA_MODELS=" + filepath.Join(dir, "models")}, env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: the model runners it starts are stopped with
	// it (killed alone, it would leave them running).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the runners, if it left any
		<-done
		logf.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(o.url + "/api/version")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(o.log)
			t.Fatalf("ollama serve does not answer on %s: %v\n%s", o.url, err, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range []struct{ name, file string }{{"tiny", "Modelfile"}, {"tiny-label", "Modelfile.label"}} {
		if hasModel(o.url, m.name) {
			continue
		}
		create := exec.Command(bin, "create", m.name, "-f", m.file)
		create.Dir = filepath.Join(dir, "model")
		create.Env = cmd.Env
		if out, err := create.CombinedOutput(); err != nil {
			t.Fatalf("ollama create %s: %v\n%s", m.name, err, out)
		}
	}
	return o
}

// hasModel reports whether the server at url has the model.
func hasModel(url, name string) bool {
	resp, err := http.Post(url+"/api/show", "application/json", strings.NewReader(`{"model":"`+name+`"}`))
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freePort is a port no one listens on, within $HFSENT_TEST_OLLAMA_PORTS
// when set.
func freePort(t *testing.T) string {
	t.Helper()
	lo, hi := 0, 0
	if r := os.Getenv(ollamaPortsEnv); r != "" {
		if _, err := fmt.Sscanf(r, "%d-%d", &lo, &hi); err != nil || lo <= 0 || hi < lo {
			t.Fatalf("%s=%q: want FIRST-LAST", ollamaPortsEnv, r)
		}
	}
	for p := lo; p <= hi; p++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		return port
	}
	t.Fatalf("no free port in %s=%s", ollamaPortsEnv, os.Getenv(ollamaPortsEnv))
	return ""
}

// slowMachine is --timeout for these tests: the server answers on the
// CPU, one call at a time, and a JSON answer under its grammar is some 50
// tokens of a tiny model; on a loaded machine a call waiting its turn may
// take longer than the default 12 s, which is not what they test.
const slowMachine = "2m"

// ollamaClassify runs classify against o's model with the labels of
// FINDINGS (positive, negative, neutral) and the flags given.
func ollamaClassify(t *testing.T, o ollama, model, in, out string, timeout time.Duration, more ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append([]string{"classify", in, "-o", out, "--no-progress", "--provider", "chat", "--model", model,
		"--labels", "positive,negative,neutral", "--endpoint", o.chat()}, more...)
	cmd, stderr := hfsent(t, ctx, args...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("classify did not end within %s\n%s", timeout, stderr)
	}
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// summaryCount reads name=N from the summary line.
func summaryCount(t *testing.T, stderr, name string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)\b` + name + `=([0-9]+)\b`).FindStringSubmatch(stderr)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// A model with random weights names a label for every row under the
// default flags: the server is made to choose (--constrain auto, OpenAI's
// json_schema), one call a row. Before, all 13 rows of the sample were
// upstream_unlabelled after 26 calls.
func TestOllamaLabelsEveryRowUnderDefaults(t *testing.T) {
	o := startOllama(t)
	out := filepath.Join(t.TempDir(), "out.csv")
	r := ollamaClassify(t, o, "tiny", "../samples/feedback.csv", out, 5*time.Minute, "-c", "4", "--timeout", slowMachine)
	rows := readResults(t, out)
	if r.code != 0 || len(rows) != 13 || summaryCount(t, r.stderr, "calls") != 13 {
		t.Fatalf("exit %d, %d rows\n%s", r.code, len(rows), r.stderr)
	}
	for _, row := range rows {
		if row["outcome"] != "success" || row["attempts"] != "1" || !strings.Contains(",positive,negative,neutral,", ","+row["label"]+",") {
			t.Errorf("row %v", row)
		}
	}
}

// Under the constraint, the score is the label token's probability over
// the labels (tiny-label: 0.835 / 0.113 / 0.042 at that token: 0.8437),
// and check says the constraint taken and the context it read.
func TestOllamaScoreAndCheckUnderTheConstraint(t *testing.T) {
	o := startOllama(t)
	out := filepath.Join(t.TempDir(), "out.csv")
	r := ollamaClassify(t, o, "tiny-label", "../samples/feedback.csv", out, 5*time.Minute, "-c", "4", "--timeout", slowMachine)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, row := range readResults(t, out) {
		if row["outcome"] != "success" || row["score"] != "0.8437" {
			t.Errorf("row %v", row)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "check", "--timeout", slowMachine, "--provider", "chat", "--model", "tiny-label", "--labels", "positive,negative,neutral", "--endpoint", o.chat())
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Run(); err != nil {
		t.Fatalf("check: %v\n%s%s", err, stdout.String(), stderr)
	}
	for _, want := range []string{"constrain: json-schema", "context:  512 tokens (Ollama's", "(score 0.8437)", "result:   ok"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("check lacks %q:\n%s", want, stdout.String())
		}
	}
}

// A text longer than the model's 512-token context is cut by Ollama
// silently (it keeps the first tokens and the tail, dropping the
// instruction, and answers 200): such a row is upstream_truncated, its
// error naming the context and the way out, and --resume redoes it.
// Before, it was success with prompt_tokens=512.
func TestOllamaTruncatedPromptIsNotSuccess(t *testing.T) {
	o := startOllama(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.csv")
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	long := strings.Repeat("The parcel came late and the box was torn. ", 70)[:3007] + "."
	_ = w.WriteAll([][]string{{"request_id", "text"}, {"L1", long}, {"S1", "Short and sweet!"}})
	if err := os.WriteFile(in, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.csv")
	r := ollamaClassify(t, o, "tiny-label", in, out, 5*time.Minute, "-c", "1", "--timeout", slowMachine)
	rows := readResults(t, out)
	if r.code != 1 || rows[0]["outcome"] != "upstream_truncated" || rows[0]["status"] != "502" || rows[0]["prompt_tokens"] != "512" ||
		!strings.Contains(rows[0]["error"], "512") || !strings.Contains(rows[0]["error"], "num_ctx") || !strings.Contains(rows[0]["error"], "--max-chars") ||
		rows[1]["outcome"] != "success" {
		t.Fatalf("exit %d\n%v\n%s", r.code, rows, r.stderr)
	}
	// --resume redoes it (here with a bound that keeps it from being sent).
	r = ollamaClassify(t, o, "tiny-label", in, out, 2*time.Minute, "--resume", "--max-chars", "2000")
	rows = readResults(t, out)
	if r.code != 1 || rows[0]["outcome"] != "invalid_input" || rows[1]["outcome"] != "success" || summaryCount(t, r.stderr, "calls") != 0 {
		t.Fatalf("resume: exit %d\n%v\n%s", r.code, rows, r.stderr)
	}
}

// Ollama's 503 "server busy" (OLLAMA_MAX_QUEUE calls already wait for the
// scheduler, here while another client makes it swap models) is
// backpressure: retried with backoff, never counted by the breaker. Before,
// it opened the breaker ("HTTP 503 (19 of 19)") and held the run for its
// 60 s cooldown, twice.
func TestOllamaBusyIsBackpressure(t *testing.T) {
	o := startOllama(t, "OLLAMA_MAX_QUEUE=2", "OLLAMA_MAX_LOADED_MODELS=1")
	dir := t.TempDir()
	in := writeInput(t, dir, 64, func(i int) string {
		if i%2 == 0 {
			return fmt.Sprintf("Row number %d was great!", i)
		}
		return fmt.Sprintf("Row number %d was slow.", i)
	})
	// Another client asks the other model in a loop: each of its calls
	// unloads tiny-label, and calls pile up while it loads again.
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, o.chat(),
				strings.NewReader(`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	out := filepath.Join(dir, "out.csv")
	// --timeout 60s: the server's one slot serves the 16 calls in flight in
	// turn, between model loads; a call may wait longer than the default
	// 12 s for its turn. --retries 8: a row may meet several busy answers
	// in a row. --constrain off: a two-token answer, not the grammar's
	// fifty, keeps the server's turns short. None is what this test is
	// about: the breaker is.
	r := ollamaClassify(t, o, "tiny-label", in, out, 4*time.Minute, "-c", "16", "--timeout", "60s", "--retries", "8", "--constrain", "off")
	stop()
	wg.Wait()
	rows := readResults(t, out)
	ok := 0
	for _, row := range rows {
		if row["outcome"] == "success" {
			ok++
		}
	}
	busy := summaryCount(t, r.stderr, "429s")
	if r.code != 0 || ok != 64 || strings.Contains(r.stderr, "breaker open") || summaryCount(t, r.stderr, "breaker_openings") != 0 {
		t.Fatalf("exit %d, %d of 64 success\n%s", r.code, ok, r.stderr)
	}
	if busy == 0 {
		logb, _ := os.ReadFile(o.log)
		t.Fatalf("the server never answered busy: the test proves nothing (%d 503s in its log)\n%s", bytes.Count(logb, []byte("| 503 |")), r.stderr)
	}
	t.Logf("%d busy answers retried; %s", busy, strings.TrimSpace(r.stderr[strings.LastIndex(r.stderr, "rows="):]))
}
