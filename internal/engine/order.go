package engine

import (
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/results"
)

// writeInOrder receives finished rows in any order and writes them in input
// order, each contiguous run as soon as it is complete. window holds one
// token per row read and not yet written: releasing it here is what lets
// the reader go on, so memory is bounded by the window.
func (r *run) writeInOrder(sink Sink, window chan struct{}) error {
	pending := make(map[int64]results.Row, cap(window))
	counts := make(map[outcome.Code]int64)
	var next int64
	var batch []results.Row
	var writeErr error
	for res := range r.done {
		pending[res.Seq] = res
		batch = batch[:0]
		for {
			row, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			batch = append(batch, row)
			next++
		}
		if len(batch) == 0 {
			continue
		}
		if writeErr == nil {
			if err := sink.Write(batch); err != nil {
				// Nothing more can be kept: stop admitting and let the run
				// drain; the rows are still counted, as lost, so the
				// summary adds up.
				writeErr = err
				r.writeFailed.Store(true)
				r.p.Stop(StopWriteError)
			}
		}
		for _, row := range batch {
			counts[row.Outcome]++
			if writeErr != nil {
				r.lost.Add(1)
			} else {
				r.written.Add(1)
				if row.Outcome.OK() {
					r.ok.Add(1)
				} else {
					r.failed.Add(1)
				}
			}
			<-window
		}
		if r.cfg.Progress != nil {
			r.cfg.Progress(r.progress())
		}
	}
	r.counts = counts
	return writeErr
}

func (r *run) progress() Progress {
	return Progress{
		Read:    r.read.Load(),
		Written: r.written.Load(),
		OK:      r.ok.Load(),
		Failed:  r.failed.Load(),
		Active:  int64(r.p.slots.InUse()),
		Elapsed: r.p.sinceStart(),
	}
}
