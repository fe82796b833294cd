package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
)

// sampler reads the provider's own count of calls in flight every
// millisecond: its mean over a window, and the most seen in a window.
type sampler struct {
	m    *meter
	mu   sync.Mutex
	at   []time.Time
	n    []int
	stop chan struct{}
	done chan struct{}
}

func sample(m *meter) *sampler {
	s := &sampler{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case now := <-t.C:
				m.mu.Lock()
				n := m.total
				m.mu.Unlock()
				s.mu.Lock()
				s.at, s.n = append(s.at, now), append(s.n, n)
				s.mu.Unlock()
			}
		}
	}()
	return s
}

func (s *sampler) close() {
	close(s.stop)
	<-s.done
}

// window is the mean and the most calls in flight between from and to.
func (s *sampler) window(from, to time.Time) (mean float64, most int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sum, k := 0, 0
	for i, at := range s.at {
		if at.Before(from) || at.After(to) {
			continue
		}
		sum += s.n[i]
		most = max(most, s.n[i])
		k++
	}
	if k == 0 {
		return 0, 0
	}
	return float64(sum) / float64(k), most
}

// load is closed-loop traffic to a server: clients each send a request as
// soon as their last one is answered.
type load struct {
	mu        sync.Mutex
	latencies []time.Duration
	codes     map[int]int
	retry     int // 503s that carried Retry-After
	stop      chan struct{}
	wg        sync.WaitGroup
	measure   atomic.Bool
}

func startLoad(s *server, clients int) *load {
	l := &load{codes: map[int]int{}, stop: make(chan struct{})}
	l.measure.Store(true)
	cl := &http.Client{Timeout: 20 * time.Second}
	var seq atomic.Int64
	for c := range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				n := seq.Add(1)
				b, _ := json.Marshal(map[string]string{"request_id": fmt.Sprintf("c%d-%d", c, n), "text": fmt.Sprintf("serve text %d %d", c, n)})
				start := time.Now()
				resp, err := cl.Post("http://"+s.addr+"/feedback-sentiment", "application/json", bytes.NewReader(b))
				d := time.Since(start)
				code := 0
				if err == nil {
					code = resp.StatusCode
					if code == 503 && resp.Header.Get("Retry-After") != "" {
						l.mu.Lock()
						l.retry++
						l.mu.Unlock()
					}
					resp.Body.Close()
				}
				if l.measure.Load() {
					l.mu.Lock()
					l.codes[code]++
					if code == 200 {
						l.latencies = append(l.latencies, d)
					}
					l.mu.Unlock()
				}
				if code != 200 {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

func (l *load) end() {
	close(l.stop)
	l.wg.Wait()
}

// reset starts counting again from now.
func (l *load) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.latencies, l.codes, l.retry = nil, map[int]int{}, 0
}

func (l *load) snapshot() (codes map[int]int, p50, p99 time.Duration, retry int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	codes = maps(l.codes)
	lat := slices.Clone(l.latencies)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		p50, p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return codes, p50, p99, l.retry
}

func maps(m map[int]int) map[int]int {
	out := make(map[int]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// budgetStatus reads budget status --json.
type budgetStatusJSON struct {
	Cap     int `json:"cap"`
	Members []struct {
		Kind     string `json:"kind"`
		Share    int    `json:"share"`
		InFlight int    `json:"in_flight"`
		Demand   int    `json:"demand"`
		Live     bool   `json:"live"`
		Safe     int    `json:"safe_share"`
		OnSafe   bool   `json:"on_safe_share"`
		PID      int    `json:"pid"`
	} `json:"members"`
}

func budgetStatus(t *testing.T, db, name string) budgetStatusJSON {
	t.Helper()
	r := mustRun(t, qenv(db), "budget", "status", name, "--json")
	var st budgetStatusJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatalf("budget status --json: %v\n%s", err, r.stdout)
	}
	return st
}

// fleet is serve replicas and workers sharing a fake provider.
type fleet struct {
	meter   *meter
	srv     *httptest.Server
	servers []*server
	workers []*worker
}

// startFleet starts nServe servers and nWorker workers of batch, each -c 12,
// all members of budget (none when budget is ""), against a fake of the
// latency given; db is where they find the budget (and the workers the batch).
func startFleet(t *testing.T, db, budget, batch string, latency time.Duration, nServe, nWorker int, extra ...string) *fleet {
	t.Helper()
	f := &fleet{}
	f.meter, f.srv = newMeter(&fakehf.Fake{Latency: latency, NoRecord: true})
	t.Cleanup(f.srv.Close)
	// No response cache: these tests measure the calls at the provider, and
	// the cache would answer the load's repeated texts without one.
	common := append([]string{"--endpoint", f.srv.URL, "-c", "12", "--timeout", "2s", "--no-cache"}, extra...)
	if budget != "" {
		common = append(common, "--budget", budget)
	}
	for range nServe {
		args := append([]string{"--retries", "0"}, common...)
		if budget != "" {
			args = append(args, "--db", db)
		}
		f.servers = append(f.servers, startServe(t, args...))
	}
	for range nWorker {
		f.workers = append(f.workers, startWorker(t, db, append([]string{"--batch", batch, "--lease", "2s", "--exit-when-done"}, common...)...))
	}
	return f
}

func rowsOf(n int) [][3]string {
	out := make([][3]string, n)
	for i := range out {
		out[i] = [3]string{fmt.Sprintf("r%05d", i), fmt.Sprintf("batch text %d", i), "x"}
	}
	return out
}

// Three servers and two workers, each -c 12, all busy, under --cap 12: the
// provider never sees more than 12 calls at once. The same fleet without
// --budget sends far more.
func TestBudgetCapsTheFleet(t *testing.T) {
	db := pgtest.URL(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "12")
	pushBatch(t, db, "capped", rowsOf(20000), "--global-cap", "100")
	f := startFleet(t, db, "b", "capped", 20*time.Millisecond, 3, 2)
	var loads []*load
	for _, s := range f.servers {
		loads = append(loads, startLoad(s, 8))
	}
	time.Sleep(4 * time.Second)
	st := budgetStatus(t, db, "b")
	for _, l := range loads {
		l.end()
	}
	f.meter.mu.Lock()
	most := f.meter.max
	f.meter.mu.Unlock()
	if most > 12 {
		t.Fatalf("the provider saw %d calls at once under a budget of 12", most)
	}
	if most < 10 {
		t.Fatalf("the provider saw at most %d calls at once: the cap of 12 was never approached, so not tested", most)
	}
	kinds, shares := map[string]int{}, 0
	for _, m := range st.Members {
		kinds[m.Kind]++
		shares += m.Share
	}
	if st.Cap != 12 || kinds["serve"] != 3 || kinds["worker"] != 2 || shares > 12 {
		t.Fatalf("budget status: cap %d, kinds %v, shares sum %d\n%+v", st.Cap, kinds, shares, st)
	}
	t.Logf("with --budget: the provider saw at most %d calls at once (cap 12)", most)

	// The same fleet without --budget.
	pushBatch(t, db, "free", rowsOf(20000), "--global-cap", "100")
	g := startFleet(t, db, "", "free", 20*time.Millisecond, 3, 2)
	loads = nil
	for _, s := range g.servers {
		loads = append(loads, startLoad(s, 8))
	}
	time.Sleep(3 * time.Second)
	for _, l := range loads {
		l.end()
	}
	g.meter.mu.Lock()
	free := g.meter.max
	g.meter.mu.Unlock()
	t.Logf("without --budget: the provider saw at most %d calls at once", free)
	if free <= 24 {
		t.Fatalf("without a budget the fleet sent at most %d calls at once: the comparison shows nothing", free)
	}
}

// With servers' traffic below the cap and workers that would take it all,
// the servers answer with no 503 and at their latency alone (p99 within
// 1.2x of theirs without the batch), and the workers take the rest, the
// servers' unused headroom included: at least 0.85 x the cap in flight on
// average (issue 25; before the headroom was lent, 9 of 12 at best, 7.8 on
// a loaded machine). Alone and with the batch alternate, five rounds of
// each, so that what else the machine runs weighs on both alike; the
// figures are the median round's.
func TestBudgetInteractiveFirst(t *testing.T) {
	db := pgtest.URL(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "12")
	pushBatch(t, db, "nightly", rowsOf(40000), "--global-cap", "100")
	// Latency and utilisation are measured on what users run: the fleet
	// is the binary built without -race (the other budget tests run the
	// -race one), whose slower calls on a loaded machine would measure the
	// race detector.
	plain := plainBin(t)
	// A 100 ms provider (bench/budget.sh run 5 has the 50 ms): at
	// half the calls a second for the same calls in flight, the CPU the
	// fleet takes from a 2-core machine weighs half as much on the
	// servers' latency, which is what the test compares.
	m, srv := newMeter(&fakehf.Fake{Latency: 100 * time.Millisecond, NoRecord: true})
	t.Cleanup(srv.Close)
	common := []string{"--endpoint", srv.URL, "-c", "12", "--timeout", "2s", "--no-cache", "--budget", "b"}
	var loads []*load
	for range 3 {
		s := startServeBin(t, plain, append([]string{"--retries", "0", "--db", db}, common...)...)
		loads = append(loads, startLoad(s, 2))
	}
	defer func() {
		for _, l := range loads {
			l.end()
		}
	}()
	// phase is one measure: every server's answers (only 200s), and the
	// provider's mean calls in flight (from its own count, integrated over
	// time: no sampler to take the machine's time).
	phase := func(name string, d time.Duration) (lat []time.Duration, mean float64) {
		for _, l := range loads {
			l.reset()
		}
		a0, t0 := m.inFlightArea()
		time.Sleep(d)
		a1, t1 := m.inFlightArea()
		mean = float64(a1-a0) / float64(t1.Sub(t0))
		lat = answers(t, name, loads)
		t.Logf("%s: provider in flight mean %.2f (cap 12); servers' p99 %s", name, mean, p99Of(lat))
		return lat, mean
	}
	args := append([]string{"--batch", "nightly", "--lease", "2s"}, common...)
	const rounds = 5
	var ratios, means []float64
	time.Sleep(1500 * time.Millisecond) // the servers' shares settle
	for round := range rounds {
		alone, _ := phase(fmt.Sprintf("round %d, servers alone", round+1), 3*time.Second)
		// The batch: two workers that would take the whole cap.
		ws := []*worker{startWorkerBin(t, plain, db, args...), startWorkerBin(t, plain, db, args...)}
		time.Sleep(1500 * time.Millisecond) // the shares settle
		with, mean := phase(fmt.Sprintf("round %d, servers and the batch", round+1), 4*time.Second)
		means = append(means, mean)
		ratios = append(ratios, float64(p99Of(with))/float64(p99Of(alone)))
		for _, w := range ws {
			_ = w.cmd.Process.Signal(syscall.SIGTERM) // it drains and leaves the budget
		}
		for _, w := range ws {
			w.wait(t)
		}
		time.Sleep(time.Second) // the servers take their headroom back
	}
	// The median round: a stall of the machine in a phase or two (a p99 is
	// a few answers; a renewal held up past its lease stops a member) does
	// not decide. A request that waits for a slot longer than serve's
	// --admission-wait (35 ms) is answered 503, which fails the test
	// anyway: a p99 past that is the machine's, not the budget's.
	mean, ratio := median(means), median(ratios)
	m.mu.Lock()
	most := m.max
	m.mu.Unlock()
	t.Logf("with the batch, by round: provider in flight mean %.2f, median %.2f (%.2f x cap), most %d; servers' p99 with the batch / alone %.2f, median %.2fx",
		means, mean, mean/12, most, ratios, ratio)
	if most > 12 {
		t.Fatalf("the provider saw %d calls at once under a budget of 12", most)
	}
	if mean < 0.85*12 {
		t.Fatalf("mean calls in flight %.2f (median of %.2f), want at least 0.85 x 12 = 10.2: the workers did not take what the servers leave (their headroom included)", mean, means)
	}
	if ratio > 1.2 {
		t.Fatalf("the servers' p99 with the batch is %.2fx their p99 alone (median of %.2f): want at most 1.2x", ratio, ratios)
	}
}

// answers is every server's answers' latencies since their last reset; it
// fails the test if one answered anything but 200.
func answers(t *testing.T, phase string, loads []*load) []time.Duration {
	t.Helper()
	var lat []time.Duration
	for i, l := range loads {
		l.mu.Lock()
		codes := maps(l.codes)
		lat = append(lat, l.latencies...)
		l.mu.Unlock()
		if len(codes) != 1 || codes[200] == 0 {
			t.Fatalf("%s: server %d answered %v: want only 200s while its traffic is below the cap", phase, i, codes)
		}
	}
	return lat
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func p99Of(lat []time.Duration) time.Duration {
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)*99/100]
}

// A member that stops its load gives its share to the others within two
// seconds: two servers with 8 clients each split a cap of 12; when one's
// clients stop, the other's share rises to its 8 and more.
func TestBudgetSharesMove(t *testing.T) {
	db := pgtest.URL(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "12")
	f := startFleet(t, db, "b", "", 30*time.Millisecond, 2, 0)
	a, b := startLoad(f.servers[0], 8), startLoad(f.servers[1], 8)
	defer b.end()
	// Read straight from the database: a status command per poll would
	// make the measure as coarse as its start-up.
	conn := pgConn(t, db)
	shares := func() (sa, sb int) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rows, err := conn.Query(ctx, "select pid, share from hfsent.budget_member where budget = 'b' and lease_until > now()")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var pid, share int
			if err := rows.Scan(&pid, &share); err != nil {
				t.Fatal(err)
			}
			switch pid {
			case f.servers[0].cmd.Process.Pid:
				sa = share
			case f.servers[1].cmd.Process.Pid:
				sb = share
			}
		}
		return sa, sb
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sa, sb := shares()
		if sa >= 5 && sb >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two servers never split the cap: %d and %d", sa, sb)
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.end()
	stopped := time.Now()
	for {
		sa, sb := shares()
		if sb >= 8 && sa <= 2 {
			t.Logf("%s after its load stopped, the idle server holds %d and the busy one %d of 12",
				time.Since(stopped).Round(10*time.Millisecond), sa, sb)
			return
		}
		if time.Since(stopped) > 2*time.Second {
			t.Fatalf("2s after one server's load stopped the shares are %d (idle) and %d (busy): %+v", sa, sb, budgetStatus(t, db, "b"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Faults, each checked against the provider's own count of calls in
// flight: a worker killed with -9, a worker stopped past its lease and
// continued, PostgreSQL unreachable for a while (a proxy cut); through
// all of it the provider never sees more than the cap, with no database
// nothing new is sent (a server answers 503 with Retry-After), everyone
// resumes on their own, and the batch ends with every row exactly once.
func TestBudgetFaults(t *testing.T) {
	db, viaProxy, px := proxiedDB(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "12")
	rows := rowsOf(8000)
	pushBatch(t, db, "faults", rows, "--global-cap", "100")
	// No safe share: with the database cut, nothing is sent once the
	// leases end (TestBudgetThroughADatabaseOutage has the safe shares).
	f := startFleet(t, viaProxy, "b", "faults", 40*time.Millisecond, 1, 3, "--budget-safe-for", "0")
	sm := sample(f.meter)
	defer sm.close()
	l := startLoad(f.servers[0], 2)
	defer l.end()
	begin := time.Now()
	time.Sleep(1500 * time.Millisecond)

	// kill -9
	if err := f.workers[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	if _, most := sm.window(begin, time.Now()); most > 12 {
		t.Fatalf("the provider saw %d calls at once through a kill -9, cap 12", most)
	}

	// PostgreSQL unreachable for 4 s.
	l.reset()
	px.SetDown(true)
	cut := time.Now()
	time.Sleep(4 * time.Second)
	// Leases end within 0.9 s of the last renewal asked (at most 0.25 s
	// before the cut); calls then in flight end within the fake's 40 ms.
	_, during := sm.window(cut.Add(1300*time.Millisecond), time.Now())
	codes, _, _, retry := l.snapshot()
	px.SetDown(false)
	if during > 0 {
		t.Fatalf("with the database unreachable the provider still saw %d calls at once", during)
	}
	if codes[503] == 0 || retry == 0 {
		t.Fatalf("with the database unreachable the server answered %v (503s with Retry-After: %d): want 503s with Retry-After", codes, retry)
	}
	time.Sleep(1500 * time.Millisecond)
	l.reset()
	time.Sleep(500 * time.Millisecond)
	if codes, _, _, _ := l.snapshot(); codes[200] == 0 {
		t.Fatalf("the server did not resume after the database came back: %v\n%s", codes, f.servers[0].log())
	}

	// SIGSTOP past the lease (1s) and the attempt timeout (2s), then SIGCONT.
	if err := f.workers[1].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second)
	if err := f.workers[1].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		if code := f.workers[i].wait(t); code != 0 {
			t.Fatalf("worker %d: exit %d\n%s", i, code, f.workers[i].stderr.String())
		}
	}
	_, most := sm.window(begin, time.Now())
	if most > 12 {
		t.Fatalf("the provider saw %d calls at once, cap 12", most)
	}
	w2 := f.workers[2].stderr.String()
	if !bytes.Contains([]byte(w2), []byte("cannot renew the budget's lease")) || !bytes.Contains([]byte(w2), []byte("budget renewed again")) {
		t.Fatalf("worker 2 did not say it lost and regained the budget:\n%s", w2)
	}
	checkOnceEach(t, exportRows(t, db, "faults"), idsOf(rows))
	t.Logf("provider in flight at most %d through kill -9, SIGSTOP/SIGCONT and a database cut", most)
}

// scriptedFleet is startFleet with the fake's answers scripted.
func scriptedFleet(t *testing.T, db, budget string, nServe int, script func(n int64, texts []string, r *http.Request) fakehf.Reply, extra ...string) *fleet {
	t.Helper()
	f := &fleet{}
	fake := &fakehf.Fake{Latency: 20 * time.Millisecond, NoRecord: true, Script: script}
	f.meter, f.srv = newMeter(fake)
	t.Cleanup(f.srv.Close)
	for range nServe {
		f.servers = append(f.servers, startServe(t, append([]string{"--endpoint", f.srv.URL, "-c", "6", "--timeout", "2s", "--no-cache",
			"--retries", "0", "--budget", budget, "--db", db}, extra...)...))
	}
	return f
}

// One view of an outage: a 429 with Retry-After seen by one member pauses
// every member within a fraction of a second (a notification, not the
// next renewal); a breaker one member opened is open for all, and that one
// probes.
func TestBudgetSharesAnOutage(t *testing.T) {
	db := pgtest.URL(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "12")
	var failing atomic.Bool
	script := func(_ int64, texts []string, _ *http.Request) fakehf.Reply {
		switch {
		case bytes.Contains([]byte(texts[0]), []byte("#429#")):
			return fakehf.Reply{Status: 429, Header: map[string]string{"Retry-After": "3"}}
		case bytes.Contains([]byte(texts[0]), []byte("#500#")) || failing.Load():
			return fakehf.Reply{Status: 500}
		}
		return fakehf.Reply{}
	}
	f := scriptedFleet(t, db, "b", 2, script, "--breaker-min-calls", "4", "--breaker-threshold", "0.5", "--breaker-cooldown", "3s")
	a, b := f.servers[0], f.servers[1]
	lb := startLoad(b, 2)
	defer lb.end()
	time.Sleep(1500 * time.Millisecond)
	sm := sample(f.meter)
	defer sm.close()

	// A 429 at a: b sends nothing from a fraction of a second later.
	if r := a.feedback("x1", "this one is #429# limited"); r.status != 503 {
		t.Fatalf("a answered %d to the 429", r.status)
	}
	at := time.Now()
	time.Sleep(2500 * time.Millisecond)
	if _, most := sm.window(at.Add(300*time.Millisecond), time.Now()); most > 0 {
		t.Fatalf("b still sent calls 300ms after a's 429 with Retry-After 3 (%d at once)", most)
	}
	time.Sleep(1500 * time.Millisecond)
	lb.reset()
	time.Sleep(500 * time.Millisecond)
	if codes, _, _, _ := lb.snapshot(); codes[200] == 0 {
		t.Fatalf("b did not resume after the pause: %v", codes)
	}

	// a's breaker opens on its own failures: b's opens with it, and only
	// a probes when the cooldown ends.
	for i := range 6 {
		a.feedback(fmt.Sprintf("f%d", i), "this one #500# fails")
	}
	opened := time.Now()
	time.Sleep(300 * time.Millisecond)
	lb.reset()
	time.Sleep(2 * time.Second)
	codes, _, _, _ := lb.snapshot()
	if _, most := sm.window(opened.Add(300*time.Millisecond), time.Now()); most > 0 || codes[200] > 0 {
		t.Fatalf("b sent calls while a's breaker was open (%d at once; b answered %v)", most, codes)
	}
	if codes[503] == 0 {
		t.Fatalf("b answered %v while the breaker was open for all: want 503 circuit_open", codes)
	}
	time.Sleep(3 * time.Second) // a's probe, then b resumes
	lb.reset()
	time.Sleep(time.Second)
	if codes, _, _, _ := lb.snapshot(); codes[200] == 0 {
		t.Fatalf("b did not resume once a's probe closed the breaker: %v\n%s", codes, b.log())
	}
	_ = opened
}

// budget status --watch redraws until interrupted, then exits 0.
func TestBudgetStatusWatch(t *testing.T) {
	db := pgtest.URL(t)
	mustRun(t, qenv(db), "budget", "set", "b", "--cap", "3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, stderr := hfsent(t, ctx, "budget", "status", "b", "--watch", "--interval", "100ms")
	cmd.Env = append(cmd.Env, qenv(db)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("budget status --watch after SIGINT: %v\n%s", err, stderr.String())
	}
	if n := bytes.Count(out.Bytes(), []byte("budget b: cap=3")); n < 3 {
		t.Fatalf("%d frames in 1.5s at --interval 100ms:\n%s", n, out.String())
	}
}
