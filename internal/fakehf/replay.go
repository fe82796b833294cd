package fakehf

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// The recordings in replays/ are answers of real servers, each file naming
// where its bytes come from: "real" ones are copied byte for byte from public
// recordings of today's servers (huggingface_hub's VCR cassettes,
// huggingface.js's tapes); "rebuilt" ones are written from a server's own
// source (text-embeddings-inference, huggingface-inference-toolkit) or
// documentation where no recording is public, and say which.
//
//go:embed replays/*.json
var replays embed.FS

// Recording is one file of replays/.
type Recording struct {
	Source   string `json:"source"`
	Recorded string `json:"recorded"` // real or rebuilt
	Note     string `json:"note"`
	// ByMethod answers each call with the exchange recorded for its
	// method (a redirect's POST, then the GET it became), not in turn.
	ByMethod  bool       `json:"by_method,omitempty"`
	Exchanges []Exchange `json:"exchanges"`
}

// Exchange is one request and the answer it got.
type Exchange struct {
	Request struct {
		Method  string            `json:"method"`
		URI     string            `json:"uri"`
		Body    string            `json:"body"`
		Headers map[string]string `json:"headers"`
	} `json:"request"`
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// Load reads replays/NAME.json; it panics if there is none (a test's typo).
func Load(name string) Recording {
	b, err := replays.ReadFile("replays/" + name + ".json")
	if err != nil {
		panic(fmt.Sprintf("fakehf: no recording %q: %v", name, err))
	}
	var r Recording
	if err := json.Unmarshal(b, &r); err != nil {
		panic(fmt.Sprintf("fakehf: recording %q: %v", name, err))
	}
	if len(r.Exchanges) == 0 {
		panic(fmt.Sprintf("fakehf: recording %q has no exchange", name))
	}
	return r
}

// hopByHop are headers of the recorded connection, not of the answer: the
// loopback server sets its own.
var hopByHop = map[string]bool{"connection": true, "content-length": true, "transfer-encoding": true, "keep-alive": true}

// Reply is the recorded answer as the fake sends it: the same status,
// headers and body bytes.
func (e Exchange) Reply() Reply {
	h := map[string]string{}
	for k, v := range e.Headers {
		if !hopByHop[strings.ToLower(k)] {
			h[k] = v
		}
	}
	return Reply{Status: e.Status, Header: h, Body: e.Body, NoBody: e.Body == "", Immediate: true}
}

// Script answers call n with the recording's exchange n, and every call
// after the last with the last (ByMethod: with the exchange of the call's
// method): a Fake's Script.
func (r Recording) Script() func(n int64, _ []string, _ *http.Request) Reply {
	return func(n int64, _ []string, req *http.Request) Reply {
		if r.ByMethod {
			for _, e := range r.Exchanges {
				if strings.EqualFold(e.Request.Method, req.Method) {
					return e.Reply()
				}
			}
		}
		i := min(int(n)-1, len(r.Exchanges)-1)
		return r.Exchanges[max(i, 0)].Reply()
	}
}
