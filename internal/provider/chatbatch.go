package provider

import (
	"net/http"
	"time"

	"github.com/hfsent/hfsent/internal/outcome"
)

// ReadAnswer reads the body of a Batch API's answer to one request line
// (response.body of its output file) as a live call's answer is read: the
// label, the score, the usage; an answer that names no label is the same
// upstream_unlabelled. The prompt-truncation check needs the text, which
// the output file does not hold: Truncated makes it where the text is known.
func (c *Chat) ReadAnswer(body []byte) (Prediction, error) {
	if len(body) > maxBody {
		return Prediction{}, &Error{Outcome: outcome.UpstreamPayload, Status: 200, Msg: "answer larger than 4 MiB"}
	}
	p, err := c.parse(body, nil, c.opts(Call{}))
	if pe, ok := AsError(err); ok {
		pe.NoRetry = true // a batch's answer is read once: asked again only by a new submission
	}
	return p, err
}

// Truncated is the check a live answer gets that its prompt was cut to fit
// the server's context, for an answer to text read from a batch (nil: not
// cut).
func (c *Chat) Truncated(text string, u Usage) error {
	if e := c.truncated(u, c.messages(text)); e != nil {
		return e
	}
	return nil
}

// ReadError maps an error line of a Batch API's error file (the status
// code and body its request was answered with) through the same table a
// live answer goes through: a 400 context_length_exceeded is
// upstream_request_rejected, a 401 upstream_auth, and so on.
func (c *Chat) ReadError(status int, body []byte) *Error {
	resp := &http.Response{StatusCode: status, Header: http.Header{}}
	e := c.statusError(resp, body, time.Now())
	e.NoRetry = true
	return e
}
