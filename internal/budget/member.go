package budget

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/spend"
)

// Guard is what a member bounds and reads: resilience.Guard.
type Guard interface {
	SetShare(n int, rps float64, until time.Time)
	// SetSafe is the bound past the lease of the next SetShare.
	SetSafe(n int, until time.Time)
	// SetLapse says why the share could not be renewed.
	SetLapse(why string)
	Demand() (inFlight, peak int)
	PauseUntil(time.Time)
	OpenUntil(time.Time)
}

// MemberConfig is how a process joins a budget.
type MemberConfig struct {
	Budget string
	Kind   Kind
	// Max is the member's -c: its demand never counts above it.
	Max int
	// Timeout is its longest attempt: its calls end by its lease's end
	// plus this, after which its charge may be handed on.
	Timeout time.Duration
	// Lease is how long a renewal holds (default 1s); Every how often the
	// member renews (default a quarter of it).
	Lease, Every time.Duration
	Host         string
	PID          int
	Logger       *slog.Logger
	// Ledger, when set, is what this process spent: each renewal adds
	// what it spent since to the budget's, and gives the ledger the
	// fleet's limit (budget set --max-spend) and the others' spend.
	Ledger *spend.Ledger
	// SafeFor is how long past its lease a member that cannot renew goes
	// on sending on its safe share (0: none, it sends nothing once its
	// lease ends). SafeShare is the safe share of a member that starts
	// while its database cannot be reached (0: it sends nothing until its
	// first renewal): the operator's word that so many slots are free.
	SafeFor   time.Duration
	SafeShare int
}

// ServeWindow is how long a server's peak demand is asked for after it was
// seen: a burst is covered until it has not come back for that long, and a
// server whose traffic stopped gives its share back that much later.
const ServeWindow = 500 * time.Millisecond

// ProbeMargin is how long after the opener's probe the other members
// resume after a breaker opened for all: the probe's answer (and a new
// opening if it failed) reaches them first.
const ProbeMargin = time.Second

// Member is this process in a budget: it renews its share and applies it
// to the guard, shares pauses and open breakers with the other members,
// and says what it holds (Snapshot).
type Member struct {
	store *Store
	cfg   MemberConfig
	id    string
	log   *slog.Logger

	g       Guard
	reports chan Notice // pauses and openings seen here, to record (buffered: the hooks never block)

	share, demand, inFlight atomic.Int64
	// lent is the part of share lent from the servers' headroom, applied
	// until the next renewal is asked (returnLent); guardRPS is the rate
	// last given to the guard (the loop's own).
	lent     atomic.Int64
	guardRPS float64
	rps      atomic.Uint64 // float64 bits
	// leaseEnd is when the lease applied ends, in nanoseconds of this
	// process's monotonic clock since base: a wall-clock step must not make
	// the member report a lease it still applies as lapsed.
	base                   time.Time
	leaseEnd               atomic.Int64
	pausedUntil, openUntil atomic.Int64 // unix nanos, the budget's as last heard
	renewals, failures     atomic.Int64
	// safe is the safe share, safeEnd when it ends (as leaseEnd).
	safe, safeEnd atomic.Int64
	// lockMu orders the safe share's changes by a renewal and by the loss
	// of the session lock (session.go): lastLocked is whether the last
	// renewal saw the lock held, lostAt when its connection last ended
	// (as leaseEnd; 0: never).
	lockMu     sync.Mutex
	lastLocked bool
	lostAt     int64

	// peaks are a server's last demand peaks, one per renewal (the loop's
	// own): it asks for the most of them, so that a burst seen in the last
	// ServeWindow is covered until it has not come back for that long.
	peaks []int

	// reported is what this member has added to the budget's spend (the
	// loop's own).
	reported float64

	stop chan struct{}
	wg   sync.WaitGroup
}

// Join checks that the budget exists and prepares the member (Start runs
// it). It fails with ErrNoBudget when there is no such budget.
func Join(ctx context.Context, s *Store, cfg MemberConfig) (*Member, error) {
	if cfg.Lease <= 0 {
		cfg.Lease = time.Second
	}
	if cfg.Every <= 0 || cfg.Every > cfg.Lease/2 {
		cfg.Every = cfg.Lease / 4
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 12 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.SafeFor < 0 {
		cfg.SafeFor = 0
	}
	if _, err := s.Get(ctx, cfg.Budget); errors.Is(err, ErrNoBudget) {
		return nil, err
	} // a database that cannot be reached: Start says what the member does meanwhile
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := fmt.Sprintf("%s:%d:%s", cfg.Host, cfg.PID, hex.EncodeToString(b[:]))
	return &Member{store: s, cfg: cfg, id: id, log: cfg.Logger.With("budget", cfg.Budget), base: time.Now(),
		reports: make(chan Notice, 16), stop: make(chan struct{})}, nil
}

// ID names the member in the budget's status.
func (m *Member) ID() string { return m.id }

// Tune makes the guard a member's (its bounds set by SetShare) and chains
// its pause and breaker hooks to tell the other members.
func (m *Member) Tune(c *resilience.Config) {
	c.Shared = true
	prevPause, prevOpen := c.OnPause, c.OnOpen
	c.OnPause = func(until time.Time) {
		if prevPause != nil {
			prevPause(until)
		}
		m.tell(Notice{PauseMs: time.Until(until).Milliseconds()})
	}
	c.OnOpen = func(until time.Time) {
		if prevOpen != nil {
			prevOpen(until)
		}
		m.tell(Notice{OpenMs: time.Until(until).Milliseconds()})
	}
}

func (m *Member) tell(n Notice) {
	select {
	case m.reports <- n:
	default: // a report is under way; the next renewal carries the budget's state anyway
	}
}

// Start renews the share (the first renewal before it returns, so that a
// member that cannot get one says so at once), listens for the other
// members' notices, and records this one's, until Close.
//
// A member that cannot reach its database at start is started all the
// same: it sends on cfg.SafeShare if one was given, else nothing, until its
// first renewal (Waiting), and says so. A budget that does not exist is an
// error.
func (m *Member) Start(ctx context.Context, g Guard) error {
	m.g = g
	err := m.renew(ctx)
	if errors.Is(err, ErrNoBudget) {
		return err
	}
	if err != nil {
		m.startWithout(err)
	}
	m.wg.Add(4)
	go func() { defer m.wg.Done(); m.loop(err != nil) }()
	go func() { defer m.wg.Done(); m.hold() }()
	go func() { defer m.wg.Done(); m.listen() }()
	go func() { defer m.wg.Done(); m.record() }()
	return nil
}

// Close stops renewing and, if leave (no call of this process is in
// flight any more), hands the share back at once; otherwise it lapses with
// the lease.
func (m *Member) Close(leave bool) {
	select {
	case <-m.stop:
		return
	default:
	}
	close(m.stop)
	m.wg.Wait()
	if leave {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := m.store.Leave(ctx, m.cfg.Budget, m.id); err != nil {
			m.log.Warn("could not leave the budget: its share lapses with its lease", "err", summary(err))
		}
	}
}

// startWithout starts the member without a first renewal: on the safe
// share configured, for cfg.SafeFor, or on nothing.
func (m *Member) startWithout(err error) {
	now := time.Now()
	n := m.cfg.SafeShare
	if m.cfg.SafeFor <= 0 {
		n = 0
	}
	until := now.Add(m.cfg.SafeFor)
	m.safe.Store(int64(n))
	m.safeEnd.Store(int64(until.Sub(m.base)))
	m.g.SetSafe(n, until)
	m.g.SetShare(0, -1, now) // the lease has passed: the safe share, if any, holds
	if n > 0 {
		m.log.Warn("cannot reach the budget's database at start: sending on --budget-safe-share meanwhile; its share when it renews",
			"safe_share", n, "for_at_most", m.cfg.SafeFor, "err", summary(err))
		return
	}
	m.g.SetLapse("its database cannot be reached, and it has no safe share: it started without the database (--budget-safe-share N gives it one)")
	m.log.Warn("cannot reach the budget's database at start, and no --budget-safe-share: no provider call until it renews (waiting)",
		"err", summary(err))
}

// Waiting reports whether the member has no share to send on: it started
// without its database and no safe share, or its lease and its safe share
// passed without a renewal.
func (m *Member) Waiting() bool {
	now := time.Now()
	return !m.held(now) && !m.onSafe(now)
}

// Snapshot is what the member holds now.
type Snapshot struct {
	Share, Demand, InFlight int
	// Lent is the part of Share lent from the servers' headroom.
	Lent      int
	RPS       float64
	LeaseHeld bool
	// Safe is the safe share it falls back to; OnSafe that it is on it.
	Safe               int
	OnSafe             bool
	Paused, Open       time.Duration
	Renewals, Failures int64
}

func (m *Member) Snapshot() Snapshot {
	now := time.Now().UnixNano()
	return Snapshot{
		Share: int(m.share.Load()), Demand: int(m.demand.Load()), InFlight: int(m.inFlight.Load()), Lent: int(m.lent.Load()),
		RPS:       floatFrom(m.rps.Load()),
		LeaseHeld: m.held(time.Now()),
		Safe:      int(m.safe.Load()), OnSafe: m.onSafe(time.Now()),
		Paused:   time.Duration(max(0, m.pausedUntil.Load()-now)),
		Open:     time.Duration(max(0, m.openUntil.Load()-now)),
		Renewals: m.renewals.Load(), Failures: m.failures.Load(),
	}
}

// held reports whether the lease applied holds at t (a time.Now, with its
// monotonic reading).
func (m *Member) held(t time.Time) bool { return int64(t.Sub(m.base)) < m.leaseEnd.Load() }

// onSafe reports whether the member sends on its safe share at t: its
// lease passed, its safe share's window not.
func (m *Member) onSafe(t time.Time) bool {
	return !m.held(t) && m.safe.Load() > 0 && int64(t.Sub(m.base)) < m.safeEnd.Load()
}

// validFor is how long a renewal holds on this process's clock, counted
// from when it asked: a tenth short of the lease the database counts from
// its transaction's start (later), so the member stops first.
func (m *Member) validFor() time.Duration { return m.cfg.Lease - m.cfg.Lease/10 }

// renew makes one renewal and applies it.
func (m *Member) renew(ctx context.Context) error {
	asked := time.Now() // the lease is counted from here, on the monotonic clock
	used := m.returnLent(asked)
	inFlight, peak := m.g.Demand()
	applied, appliedRPS := int(m.share.Load()), floatFrom(m.rps.Load())
	appliedSafe := int(m.safe.Load())
	switch {
	case m.held(asked):
	case m.onSafe(asked):
		applied = appliedSafe // it sends on its safe share, at its rate
		used = min(used, appliedSafe)
	default:
		applied, appliedRPS, appliedSafe, used = 0, 0, 0, 0 // a lapsed lease grants nothing
	}
	demand := m.demandOf(peak, used)
	rctx, cancel := context.WithTimeout(ctx, m.cfg.Lease)
	defer cancel()
	r, err := m.store.Renew(rctx, m.cfg.Budget, Report{Member: m.id, Host: m.cfg.Host, PID: m.cfg.PID, Kind: m.cfg.Kind,
		Max: m.cfg.Max, Demand: demand, InFlight: inFlight, Applied: applied, AppliedRPS: appliedRPS,
		Timeout: m.cfg.Timeout, Lease: m.cfg.Lease, AppliedSafe: appliedSafe, SafeFor: m.cfg.SafeFor})
	m.demand.Store(int64(demand))
	m.inFlight.Store(int64(inFlight))
	if err != nil {
		return err
	}
	until := asked.Add(m.validFor())
	rps := r.RPS
	if !r.Rated {
		rps = -1
	}
	m.applySafe(r, asked, until.Add(m.cfg.SafeFor))
	m.g.SetShare(r.Share, rps, until)
	m.share.Store(int64(r.Share))
	m.lent.Store(int64(r.Lent))
	m.guardRPS = rps
	m.rps.Store(floatBits(r.RPS))
	m.leaseEnd.Store(int64(until.Sub(m.base)))
	m.renewals.Add(1)
	now := time.Now()
	if r.Paused > 0 {
		m.pause(now, r.Paused)
	}
	if r.Open > 0 && r.OpenBy != m.id {
		m.open(now, r.Open)
	}
	return m.reportSpend(rctx)
}

// reportSpend adds what this process spent since its last report to the
// budget's, and tells the ledger the fleet's limit and the others' spend:
// a fleet's --max-spend holds between renewals to within what the other
// members spend in one.
func (m *Member) reportSpend(ctx context.Context) error {
	if m.cfg.Ledger == nil {
		return nil
	}
	mine := m.cfg.Ledger.Totals().Spent
	limit, total, err := m.store.AddSpend(ctx, m.cfg.Budget, mine-m.reported)
	if err != nil {
		return err
	}
	m.reported = mine
	m.cfg.Ledger.SetFleet(limit, total-mine)
	return nil
}

// demandOf is what the member asks for, from the peak of its calls in
// flight plus rows waiting since its last renewal. A server asks for the
// most of its peaks over the last ServeWindow (its requests all wait for a
// slot, so the peak is its traffic). A batch member admits its rows one at
// a time, so one row waits however many are queued behind it: when a row
// had to wait beyond its share, it asks for its -c, and the batches share
// what servers leave fairly between them.
func (m *Member) demandOf(peak, applied int) int {
	if !m.cfg.Kind.Interactive() {
		if peak > applied {
			return m.cfg.Max
		}
		return min(peak, m.cfg.Max)
	}
	m.peaks = append(m.peaks, peak)
	if n := int(ServeWindow / m.cfg.Every); len(m.peaks) > max(n, 1) {
		m.peaks = m.peaks[1:]
	}
	most := 0
	for _, p := range m.peaks {
		most = max(most, p)
	}
	return min(most, m.cfg.Max)
}

// pause and open apply the budget's pause or open breaker, saying so when
// one starts (a pause or a breaker already under way is only extended).
func (m *Member) pause(now time.Time, d time.Duration) {
	until := now.Add(d)
	if m.pausedUntil.Load() < now.UnixNano() {
		m.log.Info("the budget is paused: a member got HTTP 429 with Retry-After; no call until then", "for", d.Round(time.Millisecond))
	}
	resilience.RaiseUntil(&m.pausedUntil, until)
	m.g.PauseUntil(until)
}

func (m *Member) open(now time.Time, d time.Duration) {
	until := now.Add(d + ProbeMargin)
	if m.openUntil.Load() < now.UnixNano() {
		m.log.Info("the budget's breaker is open: another member saw the provider fail and probes it", "for", (d + ProbeMargin).Round(time.Millisecond))
	}
	resilience.RaiseUntil(&m.openUntil, until)
	m.g.OpenUntil(until)
}

// lapseOf is why a renewal failed, as the rows turned away say it once
// the lease lapses.
func lapseOf(err error) string {
	if errors.Is(err, ErrNoBudget) {
		return "the budget was dropped (budget drop); sending resumes if it is created again"
	}
	return "its database cannot be reached"
}

// loop renews every cfg.Every, counted from when the last one was asked;
// failing says the renewal at Start failed.
func (m *Member) loop(failing bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-m.stop; cancel() }()
	lastShare, lastLog := int64(-1), time.Time{}
	var fb fallback
	for {
		next := time.Now().Add(m.cfg.Every)
		err := m.renew(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			m.failures.Add(1)
			m.g.SetLapse(lapseOf(err))
			if errors.Is(err, ErrNoBudget) && m.safe.Load() > 0 {
				// A budget dropped keeps nothing for anyone: no safe share.
				m.safe.Store(0)
				m.g.SetSafe(0, time.Now())
			}
			if !failing {
				failing = true
				m.sayFailing(err)
			}
			fb.note(m, time.Now())
		default:
			fb = fallback{}
			if failing {
				failing = false
				m.log.Info("budget renewed again: sending", "share", m.share.Load(), "safe_share", m.safe.Load())
			}
			if s := m.share.Load(); s != lastShare && time.Since(lastLog) >= time.Second {
				lastShare, lastLog = s, time.Now()
				snap := m.Snapshot()
				m.log.Info("budget share", "share", s, "demand", snap.Demand, "in_flight", snap.InFlight,
					"paused", snap.Paused.Round(time.Millisecond))
			}
		}
		select {
		case <-m.stop:
			return
		case <-time.After(time.Until(next)):
		}
	}
}

// sayFailing says, at the first renewal that failed, what the member does
// until one goes through.
func (m *Member) sayFailing(err error) {
	left := max(0, time.Duration(m.leaseEnd.Load()-int64(time.Since(m.base)))).Round(time.Millisecond)
	if errors.Is(err, ErrNoBudget) {
		m.log.Warn("the budget is gone (dropped?): no new provider call once the lease ends; resuming when it renews",
			"lease_ends_in", left, "err", summary(err))
		return
	}
	if safe := m.safe.Load(); safe > 0 && m.cfg.SafeFor > 0 {
		m.log.Warn("cannot renew the budget's lease (database unreachable?): on its safe share once the lease ends, its share again when it renews",
			"lease_ends_in", left, "safe_share", safe, "for_at_most", m.cfg.SafeFor, "err", summary(err))
		return
	}
	m.log.Warn("cannot renew the budget's lease (database unreachable?): no new provider call once the lease ends (no safe share); resuming when it renews",
		"lease_ends_in", left, "err", summary(err))
}

// fallback is what a member that cannot renew has said of where it stands
// (the loop's own): on its safe share, then past its window.
type fallback struct{ safeSaid, endSaid bool }

func (f *fallback) note(m *Member, now time.Time) {
	switch {
	case m.held(now):
	case m.onSafe(now):
		if !f.safeSaid {
			f.safeSaid = true
			m.log.Warn("the budget's lease ended without a renewal: sending on its safe share",
				"safe_share", m.safe.Load(), "for_at_most", time.Duration(m.safeEnd.Load()-int64(now.Sub(m.base))).Round(time.Millisecond))
		}
	case f.safeSaid && !f.endSaid:
		f.endSaid = true
		m.log.Warn("the budget's safe share ended without a renewal (--budget-safe-for): no new provider call until it renews")
	}
}

// record writes the pauses and openings seen here to the budget, and
// notifies the other members.
func (m *Member) record() {
	for {
		select {
		case <-m.stop:
			return
		case n := <-m.reports:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			var err error
			switch {
			case n.PauseMs > 0:
				err = m.store.Pause(ctx, m.cfg.Budget, m.id, time.Duration(n.PauseMs)*time.Millisecond)
			case n.OpenMs > 0:
				err = m.store.Open(ctx, m.cfg.Budget, m.id, time.Duration(n.OpenMs)*time.Millisecond)
			}
			cancel()
			if err != nil {
				m.log.Warn("could not tell the budget's other members of a pause or an open breaker", "err", summary(err))
			}
		}
	}
}

// listen LISTENs on Channel, on a connection of its own, and applies the
// notices for this budget from other members; it reconnects after a
// failure (the renewals carry the budget's state meanwhile).
func (m *Member) listen() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-m.stop; cancel() }()
	for ctx.Err() == nil {
		err := m.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		m.log.Debug("budget notifications: reconnecting", "err", summary(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (m *Member) listenOnce(ctx context.Context) error {
	conn, err := m.store.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	c := conn.Hijack() // a LISTENing connection is not handed back
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "listen "+pgx.Identifier{Channel}.Sanitize()); err != nil {
		return err
	}
	for {
		n, err := c.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		nt, ok := decodeNotice(n.Payload)
		if !ok || nt.Budget != m.cfg.Budget || nt.Member == m.id {
			continue
		}
		now := time.Now()
		if nt.PauseMs > 0 {
			m.pause(now, time.Duration(nt.PauseMs)*time.Millisecond)
		}
		if nt.OpenMs > 0 {
			m.open(now, time.Duration(nt.OpenMs)*time.Millisecond)
		}
	}
}

// summary is a database error without anything of the connection string.
func summary(err error) string {
	if err == nil {
		return ""
	}
	return queue.Summarise(err)
}
func floatBits(f float64) uint64 { return math.Float64bits(f) }
func floatFrom(b uint64) float64 { return math.Float64frombits(b) }
