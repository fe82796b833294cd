package queue

import (
	"context"
	"testing"
	"time"
)

// A rescued row is due after the row backoff its attempt has
// (rowBackoff: half to all of 1s, 2s, 4s ... 60s), the rule a failed row's
// retry follows; one whose attempts are used up is done.
func TestRescueDelaysEachRowByTheRowBackoff(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	s := spec("backoff")
	s.Lease, s.MaxAttempts, s.GlobalCap = 100*time.Millisecond, 8, 10
	b := push(t, db, s, "d", gen("r", 5, "")).Batch
	w := db.NewSession(b, "w", 0)
	out, err := w.Cycle(ctx, CycleIn{Want: 5})
	if err != nil || len(out.Claimed) != 5 {
		t.Fatal(out, err)
	}
	// Claims 1, 2, 3, 7 and 8 of their rows, all lost with their worker.
	attempts := []int{1, 2, 3, 7, 8}
	for i, c := range out.Claimed {
		if _, err := db.Pool.Exec(ctx, "update hfsent.item set attempt = $3 where batch_id = $1 and seq = $2", b.ID, c.Seq, attempts[i]); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if _, back, exhausted, err := db.NewSession(b, "o", 0).Heartbeat(ctx, "h", 1, nil); err != nil || back != 4 || exhausted != 1 {
		t.Fatalf("rescue: %d back, %d exhausted, %v; want 4 and 1", back, exhausted, err)
	}
	for i, c := range out.Claimed[:4] {
		var state string
		var dueMs float64
		if err := db.Pool.QueryRow(ctx, `select state, extract(epoch from available_at - clock_timestamp()) * 1000
			from hfsent.item where batch_id = $1 and seq = $2`, b.ID, c.Seq).Scan(&state, &dueMs); err != nil {
			t.Fatal(err)
		}
		ceil := min(time.Second<<(attempts[i]-1), time.Minute)
		// The heartbeat took a while since: a generous second off the floor.
		if lo, hi := float64((ceil/2 - time.Second).Milliseconds()), float64(ceil.Milliseconds()); state != "pending" || dueMs < lo || dueMs > hi {
			t.Errorf("row at attempt %d: %s, due in %.0f ms; want pending, due within [%v, %v] of the rescue", attempts[i], state, dueMs, ceil/2, ceil)
		}
	}
	if got := exportRows(t, db, "backoff")[4].Model; got != "upstream_failed" {
		t.Errorf("the row whose attempts are used up is %s, want upstream_failed", got)
	}
}
