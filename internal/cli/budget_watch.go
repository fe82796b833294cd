package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hfsent/hfsent/internal/budget"
	"github.com/hfsent/hfsent/internal/queue"
)

// watchFault is why budget status --watch shows an old status: since when
// the database has not answered, what it said last, and when the status
// shown was read (zero: none was).
type watchFault struct {
	since, read time.Time
	msg         string
}

// watchPoll bounds one read of the status while watching: a database that
// stops answering must not freeze the screen on its last frame.
func watchPoll(every time.Duration) time.Duration {
	return min(max(every, time.Second), 5*time.Second)
}

// watchBudget redraws the budget's status every interval until ctx ends,
// through database faults: a read that fails or does not answer within
// watchPoll redraws the last status read under a line saying since when
// the database cannot be reached and why; the next read that succeeds
// draws afresh. Only a budget that is gone (dropped) ends it, exit 2.
func watchBudget(ctx context.Context, w io.Writer, st *budget.Store, name string, every time.Duration, asJSON bool) error {
	clear := isTerminal(w) && !asJSON
	var last budget.Status
	var lastRead time.Time
	var fault *watchFault
	for {
		started := time.Now()
		pctx, cancel := context.WithTimeout(ctx, watchPoll(every))
		s, err := st.Status(pctx, name)
		timedOut := pctx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, budget.ErrNoBudget):
			return budgetError(err)
		case err != nil:
			if fault == nil {
				fault = &watchFault{since: started}
			}
			fault.msg, fault.read = queue.Summarise(err), lastRead
			if timedOut {
				fault.msg = fmt.Sprintf("no answer within %s", watchPoll(every))
			}
			if lastRead.IsZero() {
				last = budget.Status{Budget: budget.Budget{Name: name}}
			}
		default:
			last, lastRead, fault = s, time.Now(), nil
		}
		if clear {
			fmt.Fprint(w, "\x1b[H\x1b[2J")
		}
		if err := writeBudgetFrame(w, last, asJSON, fault); err != nil {
			return err
		}
		if !clear && !asJSON {
			fmt.Fprintln(w)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(started.Add(every))):
		}
	}
}
