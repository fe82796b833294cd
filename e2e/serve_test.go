package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
)

// server is `hfsent serve` running as its own process.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	mu     sync.Mutex
	stderr bytes.Buffer
	exited chan struct{}
}

var listeningRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startServe runs `hfsent serve --addr 127.0.0.1:0 args...` and waits until
// it listens.
func startServe(t *testing.T, args ...string) *server {
	t.Helper()
	return startServeBin(t, bin, args...)
}

// startServeBin is startServe with another build of hfsent (plainBin).
func startServeBin(t *testing.T, path string, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cmd, _ := hfsent(t, ctx, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Path = path
	cmd.Stderr = nil
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, cmd: cmd, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			s.mu.Lock()
			s.stderr.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, pipe)
		_ = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.exited
	})
	select {
	case s.addr = <-addr:
	case <-s.exited:
		t.Fatalf("serve exited before listening:\n%s", s.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not listen within 30s:\n%s", s.log())
	}
	return s
}

func (s *server) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// wait waits for the process to end and returns its exit code.
func (s *server) wait(limit time.Duration) int {
	s.t.Helper()
	select {
	case <-s.exited:
		return s.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		s.t.Fatalf("serve still running after %s:\n%s", limit, s.log())
		return -1
	}
}

type reply struct {
	status int
	body   map[string]any
	err    error
}

func (s *server) feedback(id, text string) reply {
	b, _ := json.Marshal(map[string]string{"request_id": id, "text": text})
	resp, err := http.Post("http://"+s.addr+"/feedback-sentiment", "application/json", bytes.NewReader(b))
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	r := reply{status: resp.StatusCode}
	r.err = json.NewDecoder(resp.Body).Decode(&r.body)
	return r
}

func (r reply) code() string {
	d, _ := r.body["detail"].(map[string]any)
	c, _ := d["code"].(string)
	return c
}

// heldFake holds every call until release is closed.
func heldFake() (*fakehf.Fake, func()) {
	release := make(chan struct{})
	var once sync.Once
	f := &fakehf.Fake{Latency: 90 * time.Millisecond}
	f.Script = func(_ int64, texts []string, r *http.Request) fakehf.Reply {
		if strings.Contains(texts[0], "#500") {
			return fakehf.Reply{Status: 500}
		}
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		return fakehf.Reply{}
	}
	return f, func() { once.Do(func() { close(release) }) }
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestServeDefaults: the binary with serve's defaults (--admission-wait
// 35ms, --retries 1): a burst of 8 with -c 3 is three answers and five 503
// local_capacity with Retry-After, the provider never above 3; a failing
// call is retried once.
func TestServeDefaults(t *testing.T) {
	f, release := heldFake()
	fake := fakehf.Start(f)
	defer fake.Close()
	defer release()
	s := startServe(t, "--endpoint", fake.URL, "-c", "3")
	replies := make(chan reply, 8)
	for i := range 8 {
		go func() { replies <- s.feedback(fmt.Sprint("b", i), fmt.Sprint("text ", i)) }()
	}
	ok, busy := 0, 0
	for i := range 8 {
		if i == 5 {
			release()
		}
		r := <-replies
		switch {
		case r.status == 200 && r.body["label"] == "POSITIVE":
			ok++
		case r.status == 503 && r.code() == "local_capacity":
			busy++
		default:
			t.Errorf("answer %d %v (%v)", r.status, r.body, r.err)
		}
	}
	if ok != 3 || busy != 5 || f.MaxInFlight() > 3 {
		t.Fatalf("%d answered, %d local_capacity, the provider held %d at once; want 3, 5, at most 3", ok, busy, f.MaxInFlight())
	}
	calls := f.Calls()
	if r := s.feedback("f", "#500"); r.status != 502 || r.code() != "upstream_failed" || f.Calls()-calls != 2 {
		t.Fatalf("a failing call: %d %v after %d calls; want 502 upstream_failed after 2", r.status, r.body, f.Calls()-calls)
	}
}

// TestServeGracefulShutdown: at SIGTERM the requests in flight get their
// answers, new connections are refused, and the process exits 0.
func TestServeGracefulShutdown(t *testing.T) {
	f, release := heldFake()
	fake := fakehf.Start(f)
	defer fake.Close()
	defer release()
	s := startServe(t, "--endpoint", fake.URL, "-c", "4")
	replies := make(chan reply, 3)
	for i := range 3 {
		go func() { replies <- s.feedback(fmt.Sprint("g", i), fmt.Sprint("in flight ", i)) }()
	}
	waitUntil(t, "three calls in flight", func() bool { return f.InFlight() == 3 })
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "new connections to be refused", func() bool {
		conn, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	select {
	case <-s.exited:
		t.Fatalf("exited with requests in flight:\n%s", s.log())
	default:
	}
	release()
	for range 3 {
		if r := <-replies; r.status != 200 || r.body["label"] != "POSITIVE" {
			t.Fatalf("a request in flight at SIGTERM got %d %v (%v)", r.status, r.body, r.err)
		}
	}
	if code := s.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0:\n%s", code, s.log())
	}
	if log := s.log(); !strings.Contains(log, "draining") || !strings.Contains(log, "msg=stopped") {
		t.Fatalf("the drain is not logged:\n%s", log)
	}
}

// TestServeSecondSignalQuits: a second signal during the drain exits 130
// at once.
func TestServeSecondSignalQuits(t *testing.T) {
	f, release := heldFake()
	fake := fakehf.Start(f)
	defer fake.Close()
	defer release()
	s := startServe(t, "--endpoint", fake.URL, "--grace", "1m")
	go s.feedback("held", "held for ever")
	waitUntil(t, "the call in flight", func() bool { return f.InFlight() == 1 })
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	waitUntil(t, "the drain", func() bool { return strings.Contains(s.log(), "draining") })
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	if code := s.wait(20 * time.Second); code != 130 {
		t.Fatalf("exit %d after a second signal, want 130:\n%s", code, s.log())
	}
}

// TestServeUsageExit: a port already taken, or a bad flag, is exit 2.
func TestServeUsageExit(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	r := runBin(t, nil, "serve", "--provider", "local", "--addr", busy.Addr().String())
	if r.code != 2 || !strings.Contains(r.stderr, "cannot listen on --addr") {
		t.Fatalf("busy port: exit %d: %s", r.code, r.stderr)
	}
	r = runBin(t, nil, "serve", "--provider", "local", "--max-items", "0")
	if r.code != 2 || !strings.Contains(r.stderr, "--max-items") {
		t.Fatalf("bad flag: exit %d: %s", r.code, r.stderr)
	}
}
