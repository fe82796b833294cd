package batchapi

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
)

// A download that stops sending is cut after Timeout without data, with an
// error that says so, not left hanging until the run's context ends.
func TestContentThatStallsIsCut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"custom_id":"r0","response":{"status_code":200,"body":{}}}` + "\n"))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1", Timeout: 200 * time.Millisecond}
	rc, err := c.Content(context.Background(), "file-1")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	n := 0
	start := time.Now()
	err = ReadResults(rc, 0, func(int, Result) error { n++; return nil })
	e, ok := AsError(err)
	if n != 1 || !ok || e.Outcome() != outcome.UpstreamTimeout || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("%d lines, %v", n, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("cut after %s", d)
	}
}

// A download that keeps sending is not cut, however long it takes in all.
func TestContentThatMovesIsNotCut(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := range 12 {
			io.WriteString(w, `{"custom_id":"r`+strconv.Itoa(i)+`","response":{"status_code":200,"body":{}}}`+"\n")
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	}))
	defer srv.Close()
	// 1.2s in all, a line every 0.1s: a Timeout of 0.6s is never reached.
	c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1", Timeout: 600 * time.Millisecond}
	rc, err := c.Content(context.Background(), "file-1")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	n := 0
	if err := ReadResults(rc, 0, func(int, Result) error { n++; return nil }); err != nil || n != 12 {
		t.Fatalf("%d lines, %v", n, err)
	}
}

// An upload the provider stops reading, or has read whole and does not
// answer, is cut: after Timeout without reading, after 10 times Timeout
// without an answer.
func TestUploadThatStallsIsCut(t *testing.T) {
	for _, c := range []struct {
		name string
		read bool
	}{{"not read", false}, {"not answered", true}} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if c.read {
					io.Copy(io.Discard, r.Body)
				} else {
					io.CopyN(io.Discard, r.Body, 64<<10)
				}
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			defer srv.Close()
			defer close(release)
			cl := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1", Timeout: 200 * time.Millisecond}
			size := int64(64 << 20)
			if c.read {
				size = 1 << 20
			}
			start := time.Now()
			_, err := cl.Upload(context.Background(), "a.jsonl", newLines(size))
			e, ok := AsError(err)
			if !ok || e.Outcome() != outcome.UpstreamTimeout || !e.Retryable() || !strings.Contains(err.Error(), "stopped reading the file, or did not answer") {
				t.Fatalf("%v", err)
			}
			d := time.Since(start)
			if d > 20*time.Second || c.read && d < time.Second { // 10 times Timeout once read whole
				t.Fatalf("cut after %s", d)
			}
		})
	}
}

func TestManyRetriesDoNotOverflowTheBackoff(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		writeJSON(w, 503, `{}`)
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1", Retries: 70, Backoff: time.Nanosecond, MaxBackoff: time.Microsecond}
	_, err := c.Get(context.Background(), "batch_1")
	if e, ok := AsError(err); !ok || e.Status != 503 || calls.Load() != 71 {
		t.Fatalf("%v after %d calls", err, calls.Load())
	}
	for i, want := range []time.Duration{1, 2, 4, 8, 8, 8} {
		if got := ceiling(1, 8, i); got != want {
			t.Errorf("ceiling(1, 8, %d) = %d, want %d", i, got, want)
		}
	}
	if got := ceiling(time.Second, time.Minute, 200); got != time.Minute {
		t.Errorf("ceiling at 200: %s", got)
	}
}

// A batch object cut short (the connection dropped mid-body) is a failure
// to ask again, not a wrong answer: the get is retried.
func TestAnAnswerCutShortIsRetried(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := `{"id":"batch_1","object":"batch","status":"in_progress"}`
		if calls.Add(1) == 1 {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			io.WriteString(w, body[:20])
			return // the server closes a short body's connection
		}
		io.WriteString(w, body)
	}))
	defer srv.Close()
	c := &Client{HTTP: srv.Client(), Root: srv.URL + "/v1", Backoff: time.Millisecond}
	b, err := c.Get(context.Background(), "batch_1")
	if err != nil || b.Status != StatusInProgress || calls.Load() != 2 {
		t.Fatalf("%+v %v after %d calls", b, err, calls.Load())
	}
	c.Retries = -1
	calls.Store(0)
	_, err = c.Get(context.Background(), "batch_1")
	if e, ok := AsError(err); !ok || !e.Retryable() || e.Outcome() != outcome.UpstreamFailed || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("%v", err)
	}
}
