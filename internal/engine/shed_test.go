package engine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/input"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/results"
)

// slowClassifier answers every call after d.
type slowClassifier struct{ d time.Duration }

func (s slowClassifier) Model() string { return "slow" }

func (s slowClassifier) Classify(ctx context.Context, call provider.Call) (provider.Answer, error) {
	select {
	case <-time.After(s.d):
	case <-ctx.Done():
		return provider.Answer{}, ctx.Err()
	}
	ans := provider.Answer{Model: "slow"}
	for range call.Texts {
		ans.Predictions = append(ans.Predictions, provider.Prediction{Label: "POSITIVE", Score: 1})
	}
	return ans, nil
}

// TestShedStandingQueue: under a sustained overload, with
// ShedStandingQueue a row waits at most ShedWait for a slot once the queue
// has stood for ShedAfter, so the rows admitted are not late by the whole
// admission wait and the others are told at once; a burst still gets the
// whole wait. Without it, rows wait in arrival order for the whole wait.
func TestShedStandingQueue(t *testing.T) {
	const admission = 300 * time.Millisecond
	run := func(shed bool) (rejectedWait, admittedWait time.Duration) {
		p := NewPipeline(context.Background(), plain(slowClassifier{20 * time.Millisecond}, 2), Config{
			AdmissionWait: admission, ShedStandingQueue: shed, Dedupe: false})
		var mu sync.Mutex
		var wg sync.WaitGroup
		begin := time.Now()
		// About 400 rows a second for a second, against a capacity of 100.
		for i := 0; time.Since(begin) < time.Second; i++ {
			at := time.Now()
			late := at.Sub(begin) > 600*time.Millisecond // well into the overload
			wg.Add(1)
			p.Submit(&Job{Row: input.Row{ID: fmt.Sprint(i), Text: fmt.Sprint("text ", i)}, At: at, Done: func(r results.Row) {
				defer wg.Done()
				if !late {
					return
				}
				waited := time.Since(at)
				mu.Lock()
				defer mu.Unlock()
				switch r.Outcome {
				case outcome.LocalCapacity:
					rejectedWait = max(rejectedWait, waited)
				case outcome.Success:
					admittedWait = max(admittedWait, waited-20*time.Millisecond)
				}
			}})
			time.Sleep(2500 * time.Microsecond)
		}
		wg.Wait()
		p.Close()
		return rejectedWait, admittedWait
	}
	rej, adm := run(true)
	if rej > 150*time.Millisecond || adm > 150*time.Millisecond {
		t.Fatalf("with shedding, rows late in the overload waited up to %s (rejected) and %s (admitted); want far less than the %s admission wait", rej, adm, admission)
	}
	rej, adm = run(false)
	if rej < 250*time.Millisecond || adm < 200*time.Millisecond {
		t.Fatalf("without shedding, rows late in the overload waited only %s (rejected) and %s (admitted): the test no longer shows what shedding changes", rej, adm)
	}
}
