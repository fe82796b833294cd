// Package provider holds the model clients (the Hugging Face HTTP API and the
// embedded offline model) behind one small interface, and the error table
// that turns every provider failure into a stable outcome code.
//
// Retries, limits, the breaker and fallback live in package resilience and
// wrap a Classifier; nothing here retries.
package provider

import (
	"context"
	"sync/atomic"
	"time"
)

// SampleText is the short, harmless text sent when hfsent itself must ask
// the endpoint something (check, and the test of an endpoint that refused
// the first texts of a run).
const SampleText = "The repair was quick and the staff were friendly."

// Prediction is the top label for one text.
type Prediction struct {
	Label string
	Score float64
}

// Answer is what one Classify call returns on success.
type Answer struct {
	// Predictions holds exactly one entry per input text, in order.
	Predictions []Prediction
	// Model names the model that answered (it differs from the configured
	// one when a fallback answered).
	Model string
	// Fallback is set when the fallback model answered because the primary
	// could not be asked.
	Fallback bool
}

// Classifier labels texts. Implementations must be safe for concurrent use.
// On failure the error is a *Error (or the context's error when ctx ended).
type Classifier interface {
	Classify(ctx context.Context, texts []string) (Answer, error)
	// Model names the model this classifier asks.
	Model() string
}

// Trace collects what happened during one row's calls. The engine puts one
// in the context (like net/http/httptrace) so that decorators deep in the
// chain can report without widening the Classifier interface.
type Trace struct {
	attempts  atomic.Int32
	fallbacks atomic.Int32
	first     atomic.Int64 // unix nanoseconds of the first call sent, 0 before
	// fallbackOf is set on the trace handed to a fallback model: its calls
	// count into that trace's fallbacks.
	fallbackOf *Trace
}

// Attempts is the number of calls actually sent to the primary provider.
func (t *Trace) Attempts() int { return int(t.attempts.Load()) }

// FallbackAttempts is the number of calls sent to the fallback model.
func (t *Trace) FallbackAttempts() int { return int(t.fallbacks.Load()) }

// Fallback returns the trace a fallback model's calls are recorded in.
func (t *Trace) Fallback() *Trace { return &Trace{fallbackOf: t} }

// FirstAttempt is when the first call was sent; ok is false if none was.
// The time a row waited before it (for the rate limit, the adaptive limit, a
// cooldown) is waiting, not time at the provider.
func (t *Trace) FirstAttempt() (at time.Time, ok bool) {
	ns := t.first.Load()
	return time.Unix(0, ns), ns != 0
}

// AddAttempt records one call sent, now.
func (t *Trace) AddAttempt() {
	if p := t.fallbackOf; p != nil {
		p.first.CompareAndSwap(0, time.Now().UnixNano())
		p.fallbacks.Add(1)
		return
	}
	t.first.CompareAndSwap(0, time.Now().UnixNano())
	t.attempts.Add(1)
}

type traceKey struct{}

// WithTrace returns a context carrying t.
func WithTrace(ctx context.Context, t *Trace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// TraceFrom returns the trace in ctx, or nil.
func TraceFrom(ctx context.Context) *Trace {
	t, _ := ctx.Value(traceKey{}).(*Trace)
	return t
}

type waitForModelKey struct{}

// WithWaitForModel asks the HF client to send X-Wait-For-Model: 1, which the
// API honours by holding the request until a loading model is ready.
func WithWaitForModel(ctx context.Context) context.Context {
	return context.WithValue(ctx, waitForModelKey{}, true)
}

func waitForModel(ctx context.Context) bool {
	v, _ := ctx.Value(waitForModelKey{}).(bool)
	return v
}

type scaleUpKey struct{}

// WithScaleUp asks the HF client to send X-Scale-Up-Timeout (the seconds
// left before ctx's deadline) to an endpoint other than the router, and to
// give the attempt that long: the proxy of an Inference Endpoint scaled to
// zero then holds the call until a replica is up, instead of answering 503.
func WithScaleUp(ctx context.Context) context.Context {
	return context.WithValue(ctx, scaleUpKey{}, true)
}

func scaleUp(ctx context.Context) bool {
	v, _ := ctx.Value(scaleUpKey{}).(bool)
	return v
}

type attemptTimeoutKey struct{}

// WithAttemptTimeout lets one attempt take up to d when that is longer than
// the client's timeout: a call that asks the API to hold it while a model
// loads must be allowed to wait for it.
func WithAttemptTimeout(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, attemptTimeoutKey{}, d)
}

func attemptTimeout(ctx context.Context, d time.Duration) time.Duration {
	if v, ok := ctx.Value(attemptTimeoutKey{}).(time.Duration); ok && v > d {
		return v
	}
	return d
}
