package provider

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

func TestParseAnswerNestedAndFlat(t *testing.T) {
	cases := []struct {
		name, body string
		n          int
		want       []Prediction
	}{
		{"nested top_k=1", `[[{"label":"POSITIVE","score":0.9987}]]`, 1, []Prediction{{Label: "POSITIVE", Score: 0.9987}}},
		{"nested all labels picks best", `[[{"label":"NEGATIVE","score":0.1},{"label":"POSITIVE","score":0.9}]]`, 1, []Prediction{{Label: "POSITIVE", Score: 0.9}}},
		{"flat single input", `[{"label":"NEGATIVE","score":0.7},{"label":"POSITIVE","score":0.3}]`, 1, []Prediction{{Label: "NEGATIVE", Score: 0.7}}},
		{"nested batch", `[[{"label":"POSITIVE","score":0.8}],[{"label":"NEGATIVE","score":0.6}]]`, 2, []Prediction{{Label: "POSITIVE", Score: 0.8}, {Label: "NEGATIVE", Score: 0.6}}},
		{"whitespace around", " \n[[{\"label\":\"LABEL_1\",\"score\":1}]]\n", 1, []Prediction{{Label: "LABEL_1", Score: 1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseAnswer([]byte(c.body), c.n)
			if err != nil {
				t.Fatalf("ParseAnswer: %v", err)
			}
			if len(got) != len(c.want) {
				t.Fatalf("got %d predictions, want %d", len(got), len(c.want))
			}
			for i := range got {
				if got[i].Label != c.want[i].Label || got[i].Score != c.want[i].Score {
					t.Errorf("prediction %d = %+v, want %+v", i, got[i], c.want[i])
				}
			}
		})
	}
}

func TestParseAnswerRejectsNonClassifications(t *testing.T) {
	for _, body := range []string{
		``, `null`, `{}`, `{"error":"x"}`, `"POSITIVE"`, `[]`, `[[]]`,
		`[{"label":"POSITIVE"}]`, `[{"score":0.5}]`, `[{"label":"","score":0.5}]`,
		`[{"label":"POSITIVE","score":1.5}]`, `[{"label":"POSITIVE","score":-0.1}]`,
		`[[{"label":"POSITIVE","score":0.5}],[{"label":"NEGATIVE","score":0.5}]]`, // 2 results for 1 input
		`[{"generated_text":"hello"}]`, `[[{"label":1,"score":0.5}]]`,
	} {
		if got, err := ParseAnswer([]byte(body), 1); err == nil {
			t.Errorf("ParseAnswer(%q) = %+v, want an error", body, got)
		}
	}
	if _, err := ParseAnswer([]byte(`[[{"label":"A","score":0.5}]]`), 2); err == nil {
		t.Error("1 result for 2 inputs must be an error")
	}
}

// A flat list is never mapped onto more than one input: for a two-label
// model, TEI's answer to a pair read from ["a", "b"] has exactly as many
// entries as inputs, sorted by score, and reading it as one label per input
// gave the second text the least likely label.
func TestParseAnswerNeverSpreadsAFlatListOverABatch(t *testing.T) {
	for n, body := range map[int]string{
		2: `[{"score":0.9998,"label":"POSITIVE"},{"score":0.0002,"label":"NEGATIVE"}]`,
		3: `[{"label":"A","score":0.5},{"label":"B","score":0.3},{"label":"C","score":0.2}]`,
	} {
		got, err := ParseAnswer([]byte(body), n)
		if !errors.Is(err, ErrFlatBatch) {
			t.Errorf("%d inputs, flat answer: %+v, %v; want ErrFlatBatch", n, got, err)
		}
	}
}

func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{
		`[[{"label":"POSITIVE","score":0.9987}]]`, `[{"label":"NEGATIVE","score":0.7}]`,
		`[[{"label":"A","score":0.1},{"label":"B","score":0.2}],[{"label":"C","score":1}]]`,
		`{"error":"Model is currently loading","estimated_time":20.0}`, `[`, `[[[]]]`, `[null]`, `[[null]]`,
	} {
		f.Add([]byte(s), 1)
		f.Add([]byte(s), 2)
	}
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		if n < -1 || n > 64 {
			return
		}
		preds, err := ParseAnswer(body, n)
		if err != nil {
			return
		}
		if len(preds) != n {
			t.Fatalf("%d predictions for %d inputs", len(preds), n)
		}
		for _, p := range preds {
			if p.Label == "" || p.Score < 0 || p.Score > 1 {
				t.Fatalf("bad prediction %+v", p)
			}
		}
		_, _ = parseLoading(body)
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"":     0,
		"1":    time.Second,
		"0.5":  500 * time.Millisecond,
		" 3 ":  3 * time.Second,
		"-4":   0,
		"soon": 0,
		"NaN":  0,
		now.Add(7 * time.Second).Format(http.TimeFormat): 7 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):    0,
	}
	for in, want := range cases {
		if got := ParseRetryAfter(in, now); got != want {
			t.Errorf("ParseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestParseRateLimit(t *testing.T) {
	cases := map[string]time.Duration{
		`"api";r=0;t=55`: 55 * time.Second,
		`"api";r=3;t=55`: 0,
		`"api";r=0`:      0,
		``:               0,
		`garbage`:        0,
	}
	for in, want := range cases {
		if got := ParseRateLimit(in); got != want {
			t.Errorf("ParseRateLimit(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestParseLoading(t *testing.T) {
	loading, est := parseLoading([]byte(`{"error":"Model distilbert/x is currently loading","estimated_time":20.5}`))
	if !loading || est != 20500*time.Millisecond {
		t.Fatalf("loading=%v est=%v", loading, est)
	}
	if loading, _ := parseLoading([]byte(`{"error":"Service Unavailable"}`)); loading {
		t.Fatal("a plain 503 is not loading")
	}
	if !strings.Contains(DefaultEndpoint, "{model}") {
		t.Fatal("default endpoint must carry {model}")
	}
}

// The router never scales a model to zero behind a proxy that holds calls:
// X-Scale-Up-Timeout goes to every other host.
func TestIsRouter(t *testing.T) {
	for host, want := range map[string]bool{
		"router.huggingface.co": true, "ROUTER.huggingface.co:443": true, "api-inference.huggingface.co": true,
		"xyz.us-east-1.aws.endpoints.huggingface.cloud": false, "127.0.0.1:8080": false, "[::1]:80": false,
		"router.huggingface.co.evil.example": false,
	} {
		if got := isRouter(host); got != want {
			t.Errorf("isRouter(%q) = %v", host, got)
		}
	}
}

// An endpoint's path ending in /predict is text-embeddings-inference's.
func TestDetectAPI(t *testing.T) {
	for ep, want := range map[string]string{
		"http://127.0.0.1:8080/predict": APITEI, "http://h/predict/": APITEI, "https://h/v1/predict?x=1": APITEI,
		"https://router.huggingface.co/hf-inference/models/m": APIHF, "http://h/": APIHF, "http://h/predictions": APIHF,
	} {
		if got := DetectAPI(ep); got != want {
			t.Errorf("DetectAPI(%q) = %s, want %s", ep, got, want)
		}
	}
}

// A server's error body, whatever it holds, gives a reason that is one
// line of at most MaxReason characters (and the ellipsis), valid UTF-8,
// with no control or format character and no token.
func FuzzServerReason(f *testing.F) {
	for _, s := range []string{
		`{"error":"Model x does not exist"}`, `{"error":"Inference failed","error_type":"backend"}`,
		`{"error":{"message":"Invalid model id","code":400}}`, `{"detail":[{"msg":"field required"}]}`,
		`{"error":["a","b"]}`, `{"errors":[{"message":"m"}]}`, `{"error":"invalid_grant","error_description":"d"}`,
		`{"message":"No API key found in request","request_id":"ab53"}`,
		"Failed to deserialize the JSON body into the target type: missing field `inputs` at line 1 column 158",
		"<html>503</html>", "line\none\r\u202e\x00", `{"error":"Bearer hf_secretsecretsecret"}`, "\xff\xfe", "",
	} {
		f.Add([]byte(s), "text/plain")
	}
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		h := http.Header{"Content-Type": {contentType}}
		r := summarise(serverReason(h, body), "hf_secretsecretsecret")
		if !utf8.ValidString(r) || len([]rune(r)) > MaxReason+1 || strings.Contains(r, "hf_secretsecretsecret") {
			t.Fatalf("reason %q", r)
		}
		for _, c := range r {
			if unicode.IsControl(c) || unicode.Is(unicode.Cf, c) || c != ' ' && unicode.IsSpace(c) {
				t.Fatalf("reason %q has %U", r, c)
			}
		}
		if strings.HasPrefix(r, " ") || strings.HasSuffix(r, " ") {
			t.Fatalf("reason %q not trimmed", r)
		}
	})
}
