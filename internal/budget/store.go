// Package budget shares one provider budget among processes on any
// machines: serve replicas, classify runs and queue workers. Each member
// holds a share of the budget's cap (calls in flight) and of its rate under
// a short lease it renews several times a lease, reporting its demand; the
// renewal divides the cap in one transaction on the budget row (Ideal,
// Grant, Charge), servers first. A call never waits on the database: the
// share is a bound on the member's own slots (resilience.Guard.SetShare).
//
// The invariant, and the rules that keep it, are in docs/guides/budget.md.
package budget

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hfsent/hfsent/internal/sqlfile"

	"github.com/hfsent/hfsent/internal/visible"
)

//go:embed sql/*.sql
var sqlFiles embed.FS

// load reads sql/<name>.sql: a statement sent with named parameters.
func load(name string) string { return sqlfile.Read(sqlFiles, name) }

var (
	// A renewal, in the order it sends them.
	sqlLockBudget = load("lock_budget")
	sqlLost       = load("lost")
	sqlReclaim    = load("reclaim")
	sqlMembers    = load("members")
	sqlRenew      = load("renew")
	sqlLeave      = load("leave")

	// A member's session lock, on its own connection.
	sqlSessionLock = load("session_lock")

	// What members share of an outage.
	sqlPause  = load("pause")
	sqlOpen   = load("open")
	sqlNotify = load("notify")

	// The commands.
	sqlSet           = load("set")
	sqlBudget        = load("budget")
	sqlBudgets       = load("budgets")
	sqlStatusMembers = load("status_members")
	sqlDrop          = load("drop")

	// A member's spend, after its renewal (with a ledger).
	sqlSpend = load("spend")
)

// Channel is where members are told of a pause or an open breaker.
const Channel = "hfsent_budget"

// ReclaimGrace is added to a lapsed member's lease and attempt timeout
// before its charge is handed back: a call cut at its timeout may take a
// moment more to end at the provider.
const ReclaimGrace = time.Second

// Errors a command turns into exit 2.
var (
	ErrNoBudget = errors.New("no such budget")
	ErrName     = errors.New("bad budget name")
)

// MaxNameChars bounds a budget's name.
const MaxNameChars = 200

// CheckName refuses a name that could not be shown as it is (a control or
// formatting character, bytes that are not UTF-8), a blank one, or one
// over MaxNameChars.
func CheckName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("%w: a budget needs a name", ErrName)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s is not UTF-8", ErrName, strconv.Quote(name))
	case utf8.RuneCountInString(name) > MaxNameChars:
		return fmt.Errorf("%w: over %d characters", ErrName, MaxNameChars)
	}
	if r, i := visible.Hidden(name); i >= 0 {
		return fmt.Errorf("%w: %s holds %U: a name may hold letters, digits, punctuation, symbols and spaces", ErrName, strconv.Quote(name), r)
	}
	return nil
}

// Store is the budgets in a database.
type Store struct {
	pool *pgxpool.Pool
	// afterLock, when set (tests), runs between a renewal's two round
	// trips, while it holds the budget row: where a member stopped
	// (SIGSTOP) holds it.
	afterLock func()
}

// renewIdleTimeout ends a renewal's session when it sits inside its
// transaction, holding the budget row, longer than this between its two
// round trips: a member stopped (SIGSTOP) or cut off there would hold the
// row, and every other member's renewal would wait behind it, their leases
// lapsing one by one (CI: a fleet on its safe shares, a killed member's row
// not reclaimed). Ending the session releases the row; the member's
// session lock, on its own connection, is not touched.
const renewIdleTimeout = time.Second

// NewStore uses pool (the queue's: the schema is migrated with it).
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Budget is one budget's settings and what its members share.
type Budget struct {
	Name       string
	Cap        int
	RPS        float64
	BatchFloor int
	Paused     time.Duration // left of a pause after a 429
	Open       time.Duration // left of an open breaker before its probe
	OpenBy     string        // the member that probes
	CreatedAt  time.Time
	Members    int // live members (List)
	Shares     int // their shares' sum (List)
	// MaxSpend is the fleet's limit in USD (0: none); Spent what the
	// members have spent since the budget was made (Get).
	MaxSpend, Spent float64
}

// Set creates the budget or changes it; rps and floor nil keep what it
// has (or take the defaults: no rate, a floor of 1, no spending limit). It
// returns the settings it wrote (Name, Cap, RPS, BatchFloor, MaxSpend), as
// they were when it wrote them, and whether it created the budget.
func (s *Store) Set(ctx context.Context, name string, capacity int, rps *float64, floor *int, maxSpend *float64) (b Budget, created bool, err error) {
	b.Name = name
	err = s.pool.QueryRow(ctx, sqlSet, pgx.StrictNamedArgs{"name": name, "cap": capacity, "rps": rps, "floor": floor, "max_spend": maxSpend}).
		Scan(&created, &b.Cap, &b.RPS, &b.BatchFloor, &b.MaxSpend)
	return b, created, err
}

// AddSpend adds delta USD to what the budget's members spent, and reads
// its limit and total: ErrNoBudget when it is gone.
func (s *Store) AddSpend(ctx context.Context, name string, delta float64) (limit, spent float64, err error) {
	err = s.pool.QueryRow(ctx, sqlSpend, pgx.StrictNamedArgs{"budget": name, "delta": delta}).Scan(&limit, &spent)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w %s (dropped?)", ErrNoBudget, strconv.Quote(name))
	}
	return limit, spent, err
}

// Get reads one budget: ErrNoBudget when there is none.
func (s *Store) Get(ctx context.Context, name string) (Budget, error) {
	var b Budget
	var paused, open int64
	err := s.pool.QueryRow(ctx, sqlBudget, pgx.StrictNamedArgs{"name": name}).
		Scan(&b.Name, &b.Cap, &b.RPS, &b.BatchFloor, &paused, &open, &b.OpenBy, &b.CreatedAt, &b.MaxSpend, &b.Spent)
	if errors.Is(err, pgx.ErrNoRows) {
		return b, fmt.Errorf("%w %s: create it with hfsent budget set %s --cap N", ErrNoBudget, strconv.Quote(name), shellWord(name))
	}
	b.Paused, b.Open = time.Duration(paused)*time.Millisecond, time.Duration(open)*time.Millisecond
	return b, err
}

func shellWord(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("-_./:", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// List reads every budget.
func (s *Store) List(ctx context.Context) ([]Budget, error) {
	rows, err := s.pool.Query(ctx, sqlBudgets, pgx.StrictNamedArgs{})
	if err != nil {
		return nil, err
	}
	var out []Budget
	var b Budget
	_, err = pgx.ForEachRow(rows, []any{&b.Name, &b.Cap, &b.RPS, &b.BatchFloor, &b.Members, &b.Shares, &b.CreatedAt}, func() error {
		out = append(out, b)
		return nil
	})
	return out, err
}

// Drop deletes the budget and its members: ErrNoBudget when there is none.
// Members still running find it gone at their next renewal and send
// nothing more.
func (s *Store) Drop(ctx context.Context, name string) error {
	tag, err := s.pool.Exec(ctx, sqlDrop, pgx.StrictNamedArgs{"name": name})
	if err == nil && tag.RowsAffected() == 0 {
		return fmt.Errorf("%w %s", ErrNoBudget, strconv.Quote(name))
	}
	return err
}

// MemberRow is one member as status shows it.
type MemberRow struct {
	ID       string  `json:"id"`
	Host     string  `json:"host"`
	PID      int     `json:"pid"`
	Kind     Kind    `json:"kind"`
	Max      int     `json:"max"`
	Demand   int     `json:"demand"`
	InFlight int     `json:"in_flight"`
	Share    int     `json:"share"`
	Charge   int     `json:"charge"`
	RPS      float64 `json:"rps"`
	Live     bool    `json:"live"`
	// Safe is its safe share; OnSafe that its lease passed and its safe
	// window not: it sends on its safe share if it runs (cut off from the
	// database).
	Safe   int  `json:"safe_share"`
	OnSafe bool `json:"on_safe_share"`
	// RenewedAgo is how long ago it last renewed, by the database's clock.
	RenewedAgoMs int64 `json:"renewed_ms_ago"`
	Renewals     int64 `json:"renewals"`
}

// Status is a budget and its members.
type Status struct {
	Budget  Budget
	Members []MemberRow
}

// Status reads the budget and every member row (lapsed ones too, until
// they are reclaimed): ErrNoBudget when there is none.
func (s *Store) Status(ctx context.Context, name string) (Status, error) {
	b, err := s.Get(ctx, name)
	if err != nil {
		return Status{}, err
	}
	rows, err := s.pool.Query(ctx, sqlStatusMembers, pgx.StrictNamedArgs{"name": name})
	if err != nil {
		return Status{}, err
	}
	st := Status{Budget: b}
	var m MemberRow
	var kind string
	_, err = pgx.ForEachRow(rows, []any{&m.ID, &m.Host, &m.PID, &kind, &m.Max, &m.Demand, &m.InFlight, &m.Share, &m.Charge,
		&m.RPS, &m.Live, &m.Safe, &m.OnSafe, &m.RenewedAgoMs, &m.Renewals}, func() error {
		m.Kind = Kind(kind)
		st.Members = append(st.Members, m)
		return nil
	})
	return st, err
}

// Report is what a member tells the budget at a renewal.
type Report struct {
	Member   string
	Host     string
	PID      int
	Kind     Kind
	Max      int // its -c
	Demand   int // peak of in flight plus waiting since the last renewal, at most Max
	InFlight int // calls in flight now
	Applied  int // the share it applies now (0 when its lease has passed)
	// AppliedRPS is the rate it applies now (0 when its lease has passed).
	AppliedRPS float64
	Timeout    time.Duration // its longest attempt: how long its calls may outlast its lease
	Lease      time.Duration
	// AppliedSafe is the safe share it would fall back to now (or is on);
	// SafeFor how long past its lease it may send on it (0: never).
	AppliedSafe int
	SafeFor     time.Duration
}

// Renewal is what a renewal grants.
type Renewal struct {
	Share int
	// Lent is the part of Share that is the servers' headroom lent to a
	// batch member: it applies it only until it asks for its next renewal.
	Lent  int
	RPS   float64 // this member's part of the budget's rate
	Rated bool    // the budget has a rate (else RPS is 0 and means none)
	Cap   int
	// Safe is its safe share (SafeShare): what it may send on for its
	// SafeFor past its lease, with no database.
	Safe   int
	Paused time.Duration
	Open   time.Duration
	OpenBy string
	// Locked is whether the member's session lock was held when it
	// renewed: if so, the budget keeps its safe share only while that
	// session lasts (a process gone is reclaimed without it).
	Locked bool
}

// Renew reports r, and takes the member's share and lease, in one
// transaction holding the budget row: lapsed members past their calls are
// reclaimed, the ideal division computed over every member's last demand,
// and this member granted what the others' charges leave of its ideal.
// ErrNoBudget when the budget is gone.
func (s *Store) Renew(ctx context.Context, budget string, r Report) (Renewal, error) {
	var out Renewal
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return out, err
	}
	done := false
	defer func() {
		if !done {
			// A connection left inside a transaction is not put back.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
		conn.Release()
	}()
	var floor int
	var paused, open int64
	found := false
	claims := []Claim{}
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(fmt.Sprintf("set local idle_in_transaction_session_timeout = %d", renewIdleTimeout.Milliseconds()))
	b.Queue(sqlLockBudget, pgx.StrictNamedArgs{"budget": budget}).Query(func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&out.Cap, &out.RPS, &floor, &paused, &open, &out.OpenBy}, func() error {
			found = true
			return nil
		})
		return err
	})
	b.Queue(sqlLost, pgx.StrictNamedArgs{"budget": budget})
	b.Queue(sqlReclaim, pgx.StrictNamedArgs{"budget": budget, "grace_ms": ReclaimGrace.Milliseconds()})
	b.Queue(sqlMembers, pgx.StrictNamedArgs{"budget": budget, "member": r.Member}).Query(func(rows pgx.Rows) error {
		var c Claim
		var kind string
		_, err := pgx.ForEachRow(rows, []any{&c.ID, &kind, &c.Max, &c.Demand, &c.Charge, &c.RPSCharge, &c.Live}, func() error {
			c.Kind = Kind(kind)
			claims = append(claims, c)
			return nil
		})
		return err
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return out, err
	}
	if !found {
		_, _ = conn.Exec(ctx, "rollback")
		done = true
		return out, fmt.Errorf("%w %s (dropped?)", ErrNoBudget, strconv.Quote(budget))
	}
	if s.afterLock != nil {
		s.afterLock()
	}
	me := len(claims)
	claims = append(claims, Claim{ID: r.Member, Kind: r.Kind, Max: r.Max, Demand: r.Demand, Live: true})
	ideal, lent := Divide(out.Cap, floor, claims)
	out.Share = Grant(out.Cap, me, claims, ideal)
	out.Lent = LentOf(out.Share, ideal[me], lent[me])
	charge := Charge(out.Share, r.Applied, r.InFlight)
	safeCharge := 0
	if r.SafeFor > 0 {
		// Within its own part: the lent slots are given back at its next
		// ask, and are not its to keep through an outage.
		out.Safe = SafeShare(out.Cap, len(claims), out.Share-out.Lent)
		safeCharge = SafeCharge(out.Safe, r.AppliedSafe)
	}
	rpsCharge := 0.0
	if out.Rated = out.RPS > 0; out.Rated {
		out.RPS = GrantRate(out.RPS, me, claims, ideal)
		rpsCharge = max(out.RPS, r.AppliedRPS)
	}
	out.Paused, out.Open = time.Duration(paused)*time.Millisecond, time.Duration(open)*time.Millisecond
	b = &pgx.Batch{}
	b.Queue(sqlRenew, pgx.StrictNamedArgs{"budget": budget, "member": r.Member, "host": r.Host, "pid": r.PID, "kind": string(r.Kind),
		"max_calls": r.Max, "demand": r.Demand, "in_flight": r.InFlight, "share": out.Share, "charge": charge, "rps": out.RPS, "rps_charge": rpsCharge,
		"timeout_ms": max(1, r.Timeout.Milliseconds()), "lease_ms": r.Lease.Milliseconds(),
		"safe": safeCharge, "safe_ms": max(0, r.SafeFor.Milliseconds())}).QueryRow(func(row pgx.Row) error {
		return row.Scan(&out.Locked)
	})
	b.Queue("commit")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return out, err
	}
	done = true
	return out, nil
}

// Leave deletes the member's row: for a member with no call in flight
// (after its drain), whose charge is then free at once.
func (s *Store) Leave(ctx context.Context, budget, member string) error {
	_, err := s.pool.Exec(ctx, sqlLeave, pgx.StrictNamedArgs{"budget": budget, "member": member})
	return err
}

// Pause records a pause of d for every member of the budget, and tells
// them at once.
func (s *Store) Pause(ctx context.Context, budget, member string, d time.Duration) error {
	return s.share(ctx, sqlPause, pgx.StrictNamedArgs{"budget": budget, "ms": d.Milliseconds()}, Notice{Budget: budget, Member: member, PauseMs: d.Milliseconds()})
}

// Open records the member's breaker open for d for every member (the
// member probes when d is over), and tells them at once.
func (s *Store) Open(ctx context.Context, budget, member string, d time.Duration) error {
	return s.share(ctx, sqlOpen, pgx.StrictNamedArgs{"budget": budget, "member": member, "ms": d.Milliseconds()}, Notice{Budget: budget, Member: member, OpenMs: d.Milliseconds()})
}

func (s *Store) share(ctx context.Context, sql string, args pgx.StrictNamedArgs, n Notice) error {
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(sql, args)
	b.Queue(sqlNotify, pgx.StrictNamedArgs{"payload": n.encode()})
	b.Queue("commit")
	return s.pool.SendBatch(ctx, b).Close()
}

// Notice is a notification on Channel: a pause or an open breaker, as what
// is left of it (ms), for the members of Budget but Member.
type Notice struct {
	Budget  string
	Member  string
	PauseMs int64
	OpenMs  int64
}

// The payload is tab-separated: the budget's and member's names hold no
// control character (CheckName; the member's id is made here).
func (n Notice) encode() string {
	return strings.Join([]string{n.Budget, n.Member, strconv.FormatInt(n.PauseMs, 10), strconv.FormatInt(n.OpenMs, 10)}, "\t")
}

func decodeNotice(s string) (Notice, bool) {
	f := strings.Split(s, "\t")
	if len(f) != 4 {
		return Notice{}, false
	}
	p, err1 := strconv.ParseInt(f[2], 10, 64)
	o, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || err2 != nil {
		return Notice{}, false
	}
	return Notice{Budget: f[0], Member: f[1], PauseMs: p, OpenMs: o}, true
}
