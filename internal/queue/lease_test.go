package queue

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/resilience"
)

// A heartbeat does not revive a lease that already expired: from then on
// the row's place under the global cap was free, and another worker took
// it. Renewed, the row would count again beside that worker's, and its
// worker would think it may still send it.
func TestRenewDoesNotReviveAnExpiredLease(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	s := spec("revive")
	s.GlobalCap = 2
	b := push(t, db, s, "d", gen("r", 4, "")).Batch
	a := db.NewSession(b, "a", 200*time.Millisecond)
	outA, err := a.Cycle(ctx, CycleIn{Want: 2})
	if err != nil || len(outA.Claimed) != 2 {
		t.Fatalf("A claimed %+v, %v", outA.Claimed, err)
	}
	time.Sleep(300 * time.Millisecond)
	other := db.NewSession(b, "b", 30*time.Second)
	if out, err := other.Cycle(ctx, CycleIn{Want: 2}); err != nil || len(out.Claimed) != 2 {
		t.Fatalf("B claimed %+v, %v once A's leases expired; want the cap's 2 places", out.Claimed, err)
	}
	renewed, _, _, err := a.Heartbeat(ctx, "h", 1, []int64{outA.Claimed[0].Seq, outA.Claimed[1].Seq})
	if err != nil {
		t.Fatal(err)
	}
	live := queryInt(t, db, `select count(*) from hfsent.item where batch_id = $1 and state = 'running' and lease_until > clock_timestamp()`, b.ID)
	if len(renewed) != 0 || live != 2 {
		t.Fatalf("A's heartbeat renewed %v; %d rows run under a live lease: the cap is 2", renewed, live)
	}
}

// stalledStore is a worker's session whose first claim's answer comes back
// only after the claim's lease: the process was stopped (SIGSTOP) with the
// round trip on its way, or the answer was slow to come.
type stalledStore struct {
	*Session
	stall time.Duration
	once  sync.Once
}

func (s *stalledStore) Cycle(ctx context.Context, in CycleIn) (CycleOut, error) {
	out, err := s.Session.Cycle(ctx, in)
	if len(out.Claimed) > 0 {
		s.once.Do(func() { time.Sleep(s.stall) })
	}
	return out, err
}

// A worker sends a row only while it holds the row's lease by its own
// clock: the rows of a claim whose answer came back past the lease are not
// sent (their place under the cap may be another worker's by then); they
// go back, and are sent once claimed again. The fake provider checks, at
// each call, that the database holds the row running under a live lease.
func TestWorkerSendsNothingPastItsLease(t *testing.T) {
	db := openDB(t)
	s := spec("stall")
	s.GlobalCap = 2
	rows := gen("r", 2, "")
	b := push(t, db, s, "d", rows).Batch
	var mu sync.Mutex
	var unleased []string
	fake := &fakehf.Fake{Latency: 5 * time.Millisecond, Script: func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		f := strings.Fields(texts[0]) // gen's "text r N": row N
		seq, _ := strconv.ParseInt(f[len(f)-1], 10, 64)
		live := queryInt(t, db, `select count(*) from hfsent.item where batch_id = $1 and seq = $2 and state = 'running'
			and lease_owner = 'a' and lease_until > clock_timestamp()`, b.ID, seq)
		if live == 0 {
			mu.Lock()
			unleased = append(unleased, texts[0])
			mu.Unlock()
		}
		return fakehf.Reply{}
	}}
	srv := fakehf.Start(fake)
	defer srv.Close()
	cls, err := provider.NewHF(provider.HFConfig{Endpoint: srv.URL, Concurrency: 2, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := newWorker(&stalledStore{Session: db.NewSession(b, "a", 300*time.Millisecond), stall: 500 * time.Millisecond}, b,
		WorkerConfig{Capacity: 2, ExitWhenDone: true, Poll: 20 * time.Millisecond})
	p := engine.NewPipeline(context.Background(), resilience.Build(cls, resilience.Config{Concurrency: 2, Retries: 0}), engine.Config{})
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Run(ctx, p); err != nil {
		t.Fatal(err)
	}
	if len(unleased) > 0 {
		t.Fatalf("sent %q with no live lease on the row", unleased)
	}
	if st := w.Stats(); st.Finished != 2 || st.GivenBack != 2 || fake.Calls() != 2 {
		t.Fatalf("finished %d, given back %d, %d calls; want both rows given back unsent, then sent once each", st.Finished, st.GivenBack, fake.Calls())
	}
}
