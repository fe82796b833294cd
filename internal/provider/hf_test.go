package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

func newClient(t *testing.T, url string, timeout time.Duration) *provider.HF {
	t.Helper()
	c, err := provider.NewHF(provider.HFConfig{Endpoint: url, Token: "hf_secret", Concurrency: 4, Timeout: timeout, ConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestErrorTable drives the real client against the fake for every row of
// SPEC.md's outcome table that a single call can produce.
func TestErrorTable(t *testing.T) {
	cases := []struct {
		name      string
		reply     fakehf.Reply
		want      outcome.Code
		status    int
		retryable bool
	}{
		{"timeout", fakehf.Reply{Delay: 300 * time.Millisecond}, outcome.UpstreamTimeout, 504, true},
		{"429", fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "2"}}, outcome.UpstreamRateLimited, 503, true},
		{"500", fakehf.Reply{Status: 500}, outcome.UpstreamFailed, 502, true},
		{"502", fakehf.Reply{Status: 502}, outcome.UpstreamFailed, 502, true},
		{"501 not retried", fakehf.Reply{Status: 501}, outcome.UpstreamFailed, 502, false},
		{"wrong body", fakehf.Reply{Body: `{"generated_text":"hi"}`}, outcome.UpstreamPayload, 502, false},
		{"not json", fakehf.Reply{Body: `<html>oops</html>`}, outcome.UpstreamPayload, 502, false},
		{"400", fakehf.Reply{Status: 400}, outcome.UpstreamRequestRejected, 502, false},
		{"402", fakehf.Reply{Status: 402}, outcome.UpstreamQuota, 502, false},
		{"404", fakehf.Reply{Status: 404}, outcome.UpstreamNotFound, 502, false},
		{"413", fakehf.Reply{Status: 413}, outcome.UpstreamRequestRejected, 502, false},
		{"401", fakehf.Reply{Status: 401}, outcome.UpstreamAuth, 502, false},
		{"403", fakehf.Reply{Status: 403}, outcome.UpstreamAuth, 502, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := &fakehf.Fake{Script: func(int64, []string, *http.Request) fakehf.Reply { return c.reply }}
			srv := fakehf.Start(f)
			defer srv.Close()
			_, err := newClient(t, srv.URL, 100*time.Millisecond).Classify(context.Background(), provider.Call{Texts: []string{"hello"}})
			pe, ok := provider.AsError(err)
			if !ok {
				t.Fatalf("error %v is not a *provider.Error", err)
			}
			if pe.Outcome != c.want || pe.Outcome.Status() != c.status || pe.Retryable() != c.retryable {
				t.Fatalf("got %s/%d retryable=%v, want %s/%d retryable=%v", pe.Outcome, pe.Outcome.Status(), pe.Retryable(), c.want, c.status, c.retryable)
			}
			if strings.Contains(pe.Error(), "hf_secret") || strings.Contains(pe.Error(), "{") {
				t.Fatalf("error text leaks the token or a body: %q", pe.Error())
			}
		})
	}
}

func TestRetryAfterAndLoading(t *testing.T) {
	f := &fakehf.Fake{Script: func(n int64, _ []string, _ *http.Request) fakehf.Reply {
		if n == 1 {
			return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "1.5"}}
		}
		return fakehf.Reply{Status: 503, Body: `{"error":"Model x is currently loading","estimated_time":12.0}`}
	}}
	srv := fakehf.Start(f)
	defer srv.Close()
	c := newClient(t, srv.URL, time.Second)
	_, err := c.Classify(context.Background(), provider.Call{Texts: []string{"a"}})
	if pe, _ := provider.AsError(err); pe == nil || pe.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("429: %v", err)
	}
	_, err = c.Classify(context.Background(), provider.Call{Texts: []string{"a"}, WaitForModel: true})
	pe, _ := provider.AsError(err)
	if pe == nil || !pe.Loading || pe.RetryAfter != 12*time.Second || !pe.Retryable() {
		t.Fatalf("loading 503: %+v", pe)
	}
	h := f.Headers()
	if h[0].Get("X-Wait-For-Model") != "" || h[1].Get("X-Wait-For-Model") != "1" {
		t.Fatalf("X-Wait-For-Model sent only when asked: %q, %q", h[0].Get("X-Wait-For-Model"), h[1].Get("X-Wait-For-Model"))
	}
	if h[0].Get("Authorization") != "Bearer hf_secret" {
		t.Fatal("bearer token not sent")
	}
}

func TestNestedAndFlatThroughClient(t *testing.T) {
	for _, flat := range []bool{false, true} {
		f := &fakehf.Fake{Flat: flat}
		srv := fakehf.Start(f)
		ans, err := newClient(t, srv.URL, time.Second).Classify(context.Background(), provider.Call{Texts: []string{"a terrible repair"}})
		srv.Close()
		if err != nil {
			t.Fatalf("flat=%v: %v", flat, err)
		}
		if ans.Predictions[0].Label != "NEGATIVE" || ans.Model != provider.DefaultModel {
			t.Fatalf("flat=%v: %+v", flat, ans)
		}
	}
}

func TestConnectionFailureAndCancel(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{})
	url := srv.URL
	srv.Close() // nothing listens there now
	_, err := newClient(t, url, time.Second).Classify(context.Background(), provider.Call{Texts: []string{"a"}})
	if pe, _ := provider.AsError(err); pe == nil || pe.Outcome != outcome.UpstreamFailed || !pe.Retryable() {
		t.Fatalf("connection refused: %v", err)
	}

	slow := fakehf.Start(&fakehf.Fake{Latency: time.Second})
	defer slow.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, err = newClient(t, slow.URL, 5*time.Second).Classify(ctx, provider.Call{Texts: []string{"a"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled row must return the context's error, got %v", err)
	}
}

func TestLocalModel(t *testing.T) {
	l := provider.NewLocal()
	ans, err := l.Classify(context.Background(), provider.Call{Texts: []string{
		"Great service, thank you!",
		"Waited three days for a callback that never came. Very disappointed.",
		"The booking page has a slot.",
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"POSITIVE", "NEGATIVE", "NEUTRAL"}
	for i, p := range ans.Predictions {
		if p.Label != want[i] || p.Score < 0 || p.Score > 1 {
			t.Errorf("text %d: %+v, want %s", i, p, want[i])
		}
	}
	if ans.Model != provider.LocalModel {
		t.Fatal(ans.Model)
	}
}

// A malformed endpoint is refused by NewHF, and the error shows it
// redacted: never the password or a query value.
func TestEndpointValidation(t *testing.T) {
	for ep, want := range map[string]string{
		"http://u:PWSECRET@127.0.0.1:1 /models/x?api_key=QSECRET": "is not a valid URL",
		"http://[::1:bad/x?api_key=QSECRET":                       "is not a valid URL",
		"http://u:PWSECRET@/x?api_key=QSECRET":                    "has no host",
		"http:///x":                                               "has no host",
		"http:x":                                                  "not an http:// or https:// URL",
		"ftp://u:PWSECRET@h/x?api_key=QSECRET":                    "not an http:// or https:// URL",
		"127.0.0.1:8080/x":                                        "not an http:// or https:// URL",
		"http://{model}.example.com/x":                            "{model} in its host",
		"http://u:PWSECRET@h:99999/x":                             "port is not between 1 and 65535",
		"http://u:PW%zzSECRET@h/x":                                "is not a valid URL",
	} {
		_, err := provider.NewHF(provider.HFConfig{Endpoint: ep, Model: "a/b"})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", ep, err, want)
			continue
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: the error shows a credential: %v", ep, err)
		}
	}
	for _, ep := range []string{"", "HTTPS://h.example/models/{model}?wait=1", "http://[::1]:8080/x", "http://u:p@127.0.0.1:9/{model}"} {
		if _, err := provider.NewHF(provider.HFConfig{Endpoint: ep, Model: "a/b"}); err != nil {
			t.Errorf("%s: %v", ep, err)
		}
	}
	if _, err := provider.NewHF(provider.HFConfig{Endpoint: "http://h/{model}", Model: "a%zz"}); err == nil || !strings.Contains(err.Error(), `model id "a%zz"`) {
		t.Errorf("a model id that breaks the URL: %v", err)
	}
}

// A connection failure keeps net/http's *url.Error for errors.As, but its
// URL is redacted, whatever prints the chain; URL() is redacted too.
func TestTransportErrorRedactsURL(t *testing.T) {
	srv := fakehf.Start(&fakehf.Fake{})
	addr := strings.TrimPrefix(srv.URL, "http://")
	srv.Close()
	c := newClient(t, "http://user:PWSECRET@"+addr+"/m?api_key=QSECRET", time.Second)
	if strings.Contains(c.URL(), "SECRET") || !strings.Contains(c.URL(), "REDACTED") {
		t.Fatalf("URL() = %q", c.URL())
	}
	_, err := c.Classify(context.Background(), provider.Call{Texts: []string{"a"}})
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Fatalf("no *url.Error in %v", err)
	}
	for _, shown := range []string{err.Error(), fmt.Sprintf("%v", errors.Unwrap(err)), fmt.Sprintf("%+v", err), ue.Error()} {
		if strings.Contains(shown, "SECRET") {
			t.Fatalf("a credential is shown: %s", shown)
		}
	}
}
