package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/hfsent/hfsent/internal/budget"
	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/serve"
	"github.com/hfsent/hfsent/internal/spend"
	"github.com/hfsent/hfsent/internal/stage"
)

// Bounds of the budget's flags.
const (
	maxBudgetCap   = stage.MaxBudgetCap
	minWatchEvery  = 100 * time.Millisecond
	maxWatchEvery  = time.Hour
	minBudgetLease = stage.MinBudgetLease
	maxBudgetLease = stage.MaxBudgetLease
	// The safe share's window: past it a member cut off from its database
	// sends nothing more, and the budget hands its safe share on.
	minBudgetSafeFor = stage.MinBudgetSafeFor
	maxBudgetSafeFor = stage.MaxBudgetSafeFor
)

// budgetError maps a budget error to its exit code as queueError does: a
// budget that does not exist, or a bad name, is exit 2; a driver error on
// the way is exit 1, shown without the connection string.
func budgetError(err error) error {
	var ee *exitError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, budget.ErrNoBudget), errors.Is(err, budget.ErrName):
		return usageError(err)
	case errors.As(err, &ee):
		return err
	case errors.Is(err, queue.ErrURL), errors.Is(err, queue.ErrConnect):
		return queueError(err)
	}
	return &exitError{code: ExitRowsFailed, err: errors.New(queue.Summarise(err))}
}

func newBudgetCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "budget",
		Short: "One provider budget for a fleet: serve replicas, workers and classify runs share one cap",
		Long: `A budget is a cap on calls in flight (and, with --rps, calls per second) that
every process started with --budget NAME shares, on any machine: serve
replicas, queue workers and classify runs. Each holds a share under a short
lease renewed several times a second from PostgreSQL; servers' demand is met
first, batches share the rest, each keeps at least --batch-floor. A call
never waits on the database.

The database URL comes from --db, else $` + dbEnv + ` (the queue's database:
the budget's tables live beside the queue's). See docs/guides/budget.md.`,
		Example: `  export HFSENT_DB=postgres://hfsent@db.internal:5432/hfsent
  hfsent budget set hf-account --cap 12 --rps 20
  hfsent serve --budget hf-account -c 12 &
  hfsent worker --budget hf-account --batch nightly -c 12 &
  hfsent budget status hf-account --watch`,
	}
	cmd.AddCommand(newBudgetSetCmd(ios, g), newBudgetStatusCmd(ios, g), newBudgetListCmd(ios, g), newBudgetDropCmd(ios, g))
	return cmd
}

// openBudgets connects to the database; migrate brings the schema up
// first (budget set), else a schema not at this binary's version is
// refused.
func openBudgets(ctx context.Context, ios *IOStreams, o *dbOptions, migrate bool) (*queue.DB, *budget.Store, error) {
	db, err := o.open(ctx, ios, false, !migrate)
	if err != nil {
		return nil, nil, err
	}
	if migrate {
		if _, _, err := db.Migrate(ctx); err != nil {
			db.Close()
			return nil, nil, queueError(err)
		}
	}
	return db, budget.NewStore(db.Pool), nil
}

func budgetName(args []string) (string, error) {
	if len(args) != 1 {
		return "", usageErrorf("name the budget: hfsent budget COMMAND NAME")
	}
	if err := budget.CheckName(args[0]); err != nil {
		return "", usageError(err)
	}
	return args[0], nil
}

func newBudgetSetCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &dbOptions{}
	var capacity, floor int
	var rps, maxSpend float64
	cmd := &cobra.Command{
		Use:   "set NAME --cap N [--rps R] [--batch-floor N] [--max-spend USD]",
		Short: "Create a budget, or change its cap, rate or batch floor (idempotent)",
		Long: `set creates the budget NAME or changes it: members take the new cap at their
next renewal (within a second). --rps and --batch-floor keep their value when
not given (at creation: no rate, a floor of 1). The schema is created or
upgraded first, as queue push does.`,
		Example: `  hfsent budget set hf-account --cap 12
  hfsent budget set hf-account --cap 24 --rps 40 --batch-floor 2`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			name, err := budgetName(args)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("cap") {
				return usageErrorf("--cap N is required: the calls in flight the budget allows over all its members")
			}
			var rpsArg *float64
			var floorArg *int
			for _, err := range []error{
				inRange("--cap", capacity, 1, maxBudgetCap, ""),
				inRange("--rps", rps, minRPS, maxRPS, "no limit"),
				inRange("--batch-floor", floor, 0, capacity, ""),
				inRange("--max-spend", maxSpend, 0.000001, maxSpendCap, "no limit"),
			} {
				if err != nil {
					return err
				}
			}
			if cmd.Flags().Changed("rps") {
				rpsArg = &rps
			}
			if cmd.Flags().Changed("batch-floor") {
				floorArg = &floor
			}
			var spendArg *float64
			if cmd.Flags().Changed("max-spend") {
				spendArg = &maxSpend
			}
			ctx := cmd.Context()
			db, st, err := openBudgets(ctx, ios, o, true)
			if err != nil {
				return err
			}
			defer db.Close()
			// What this set wrote, not what the budget holds a moment
			// later: another writer may have changed it since.
			b, created, err := st.Set(ctx, name, capacity, rpsArg, floorArg, spendArg)
			if err != nil {
				return budgetError(err)
			}
			what := "changed"
			if created {
				what = "created"
			}
			fmt.Fprintf(ios.ErrOut, "budget %s %s: cap=%d rps=%s batch_floor=%d max_spend=%s\n", queue.Printable(name), what, b.Cap, rpsText(b.RPS), b.BatchFloor, spendText(b.MaxSpend))
			return nil
		},
	}
	addDBFlags(cmd.Flags(), o, false)
	cmd.Flags().IntVar(&capacity, "cap", 0, "calls in flight at most over every member (required; "+rangeHelp(1, maxBudgetCap)+")")
	cmd.Flags().Float64Var(&rps, "rps", 0, "calls per second at most over every member, divided as the cap is (0: no limit, else "+rangeHelp(minRPS, maxRPS)+")")
	cmd.Flags().IntVar(&floor, "batch-floor", 1, "slots every busy batch member (classify, worker) keeps however much servers want, so that batches never starve (0 to the cap)")
	cmd.Flags().Float64Var(&maxSpend, "max-spend", 0, "USD the members may spend in all since the budget was made (their calls' reported usage at each member's prices): past it, members stop sending, as with --max-spend (0: no limit; kept when not given)")
	return cmd
}

func spendText(v float64) string {
	if v <= 0 {
		return "none"
	}
	return fmtUSD(v)
}

func rpsText(r float64) string {
	if r <= 0 {
		return "none"
	}
	return strconv.FormatFloat(r, 'g', 4, 64)
}

// budgetJSON is budget status --json.
type budgetJSON struct {
	Name       string             `json:"name"`
	Cap        int                `json:"cap"`
	RPS        float64            `json:"rps"`
	BatchFloor int                `json:"batch_floor"`
	PausedMs   int64              `json:"paused_ms"`
	OpenMs     int64              `json:"breaker_open_ms"`
	OpenBy     string             `json:"breaker_open_by,omitempty"`
	Shares     int                `json:"shares"`
	InFlight   int                `json:"in_flight"`
	MaxSpend   float64            `json:"max_spend_usd"`
	Spent      float64            `json:"spent_usd"`
	Members    []budget.MemberRow `json:"members"`
	// With --watch, while the database cannot be reached: since when, why,
	// and when the status above (the last one) was read.
	Unreachable string `json:"unreachable_since,omitempty"`
	Error       string `json:"error,omitempty"`
	ReadAt      string `json:"read_at,omitempty"`
}

func newBudgetStatusCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &dbOptions{}
	var asJSON, watch bool
	var every time.Duration
	cmd := &cobra.Command{
		Use:   "status NAME [--json] [--watch]",
		Short: "The budget's cap and rate, each member's share, demand and calls in flight, the pause and the breaker",
		Long: `status shows the budget's cap and rate and every member: host, pid, kind
(serve, classify, worker), share, demand, calls in flight, when it last
renewed, its safe share (what it sends on once its lease ends without a
renewal) and whether it is on it (on_safe: its lease passed, its safe
share's window not). A member whose lease passed is listed (live=false)
until its charge is handed back, its share then listed as what it holds (its charge). The
shares listed sum to at most the cap. --watch redraws
every --interval until interrupted, through database faults: while a read
fails or does not answer (within the interval, at least 1s, at most 5s), it
redraws the last status read under a line saying since when the database
cannot be reached and why (with --json: unreachable_since, error, read_at).
A budget that does not exist, or is dropped while watched, exits 2.`,
		Example: `  hfsent budget status hf-account
  hfsent budget status hf-account --json | jq '.members[] | {kind, share, in_flight}'
  hfsent budget status hf-account --watch`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			name, err := budgetName(args)
			if err != nil {
				return err
			}
			if err := inRange("--interval", every, minWatchEvery, maxWatchEvery, ""); err != nil {
				return err
			}
			ctx := cmd.Context()
			db, st, err := openBudgets(ctx, ios, o, false)
			if err != nil {
				return err
			}
			defer db.Close()
			if !watch {
				s, err := st.Status(ctx, name)
				if err != nil {
					return budgetError(err)
				}
				return writeBudgetStatus(ios.Out, s, asJSON)
			}
			ctx, stop := interruptContext(ctx, ios, slog.New(slog.DiscardHandler), nil)
			defer stop()
			return watchBudget(ctx, ios.Out, st, name, every, asJSON)
		},
	}
	addDBFlags(cmd.Flags(), o, false)
	cmd.Flags().BoolVar(&asJSON, "json", false, "write JSON (one object; with --watch one per line)")
	cmd.Flags().BoolVar(&watch, "watch", false, "redraw every --interval until interrupted, through database faults (saying since when the database cannot be reached)")
	cmd.Flags().DurationVar(&every, "interval", time.Second, "time between redraws with --watch ("+rangeHelp(minWatchEvery, maxWatchEvery)+")")
	return cmd
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func writeBudgetStatus(w io.Writer, s budget.Status, asJSON bool) error {
	return writeBudgetFrame(w, s, asJSON, nil)
}

// writeBudgetFrame writes s; with f, as the last status read while the
// database cannot be reached (budget status --watch).
func writeBudgetFrame(w io.Writer, s budget.Status, asJSON bool, f *watchFault) error {
	b := s.Budget
	shares, inFlight := 0, 0
	for _, m := range s.Members {
		shares += m.Share
		inFlight += m.InFlight
	}
	if asJSON && f != nil && f.read.IsZero() {
		// No status read yet: nothing to show but the fault.
		return writeJSONLine(w, budgetJSON{Name: b.Name, Members: []budget.MemberRow{}, Unreachable: f.since.UTC().Format(time.RFC3339), Error: f.msg})
	}
	if asJSON {
		members := s.Members
		if members == nil {
			members = []budget.MemberRow{}
		}
		js := budgetJSON{Name: b.Name, Cap: b.Cap, RPS: b.RPS, BatchFloor: b.BatchFloor,
			PausedMs: b.Paused.Milliseconds(), OpenMs: b.Open.Milliseconds(), OpenBy: b.OpenBy,
			Shares: shares, InFlight: inFlight, MaxSpend: b.MaxSpend, Spent: roundUSD(b.Spent), Members: members}
		if f != nil {
			js.Unreachable, js.Error, js.ReadAt = f.since.UTC().Format(time.RFC3339), f.msg, f.read.UTC().Format(time.RFC3339)
		}
		return writeJSONLine(w, js)
	}
	if f != nil {
		fmt.Fprintf(w, "budget %s: cannot reach the database since %s (%s): %s\n", queue.Printable(b.Name),
			f.since.UTC().Format(time.RFC3339), time.Since(f.since).Round(time.Second), f.msg)
		if f.read.IsZero() {
			return nil
		}
		fmt.Fprintf(w, "the last status read, at %s:\n", f.read.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "budget %s: cap=%d rps=%s batch_floor=%d shares=%d in_flight=%d\n",
		queue.Printable(b.Name), b.Cap, rpsText(b.RPS), b.BatchFloor, shares, inFlight)
	pause := "none"
	if b.Paused > 0 {
		pause = b.Paused.Round(time.Millisecond).String() + " left (a 429's Retry-After)"
	}
	breaker := "closed"
	if b.Open > 0 {
		breaker = fmt.Sprintf("open, %s before %s probes", b.Open.Round(time.Millisecond), queue.Printable(b.OpenBy))
	}
	fmt.Fprintf(w, "pause: %s; breaker: %s\n", pause, breaker)
	fmt.Fprintf(w, "spend: %s USD since the budget was made (members with prices report theirs); max_spend=%s\n", fmtUSD(b.Spent), spendText(b.MaxSpend))
	fmt.Fprintf(w, "%-28s %8s %-9s %5s %6s %6s %9s %8s %5s %4s %7s %9s\n", "host", "pid", "kind", "share", "demand", "max", "in_flight", "rps", "live", "safe", "on_safe", "renewed")
	for _, m := range s.Members {
		fmt.Fprintf(w, "%-28s %8d %-9s %5d %6d %6d %9d %8s %5t %4d %7t %8dms\n", queue.Printable(m.Host), m.PID, queue.Printable(string(m.Kind)),
			m.Share, m.Demand, m.Max, m.InFlight, rpsText(m.RPS), m.Live, m.Safe, m.OnSafe, m.RenewedAgoMs)
	}
	return nil
}

func writeJSONLine(w io.Writer, v any) error {
	out, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", out)
	return err
}

func newBudgetListCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &dbOptions{}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the budgets in the database, with their live members",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			db, st, err := openBudgets(cmd.Context(), ios, o, false)
			if err != nil {
				return err
			}
			defer db.Close()
			bs, err := st.List(cmd.Context())
			if err != nil {
				return budgetError(err)
			}
			fmt.Fprintf(ios.Out, "%-24s %8s %8s %11s %8s %7s %s\n", "budget", "cap", "rps", "batch_floor", "members", "shares", "created")
			for _, b := range bs {
				fmt.Fprintf(ios.Out, "%-24s %8d %8s %11d %8d %7d %s\n", queue.Printable(b.Name), b.Cap, rpsText(b.RPS), b.BatchFloor,
					b.Members, b.Shares, b.CreatedAt.UTC().Format("2006-01-02T15:04:05Z"))
			}
			return nil
		},
	}
	addDBFlags(cmd.Flags(), o, false)
	return cmd
}

func newBudgetDropCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &dbOptions{}
	var yes bool
	cmd := &cobra.Command{
		Use:   "drop NAME --yes",
		Short: "Delete a budget (asks for --yes); its members send nothing more",
		Long: `drop deletes the budget and its members' rows. Members still running find it
gone at their next renewal, say so, and send no new call once their lease
ends (a second at most); they resume if it is created again.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			name, err := budgetName(args)
			if err != nil {
				return err
			}
			if !yes {
				return usageErrorf("budget drop deletes budget %s: its members stop sending; add --yes to confirm", queue.Printable(name))
			}
			db, st, err := openBudgets(cmd.Context(), ios, o, false)
			if err != nil {
				return err
			}
			defer db.Close()
			if err := st.Drop(cmd.Context(), name); err != nil {
				return budgetError(err)
			}
			fmt.Fprintf(ios.ErrOut, "budget %s dropped\n", queue.Printable(name))
			return nil
		},
	}
	addDBFlags(cmd.Flags(), o, false)
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm the drop")
	return cmd
}

// addBudgetFlags adds --budget and its flags, which classify, serve and
// the worker take (with --db, or $HFSENT_DB), and a --cascade's stage.
func addBudgetFlags(fs *pflag.FlagSet, o *stage.Budget) {
	fs.StringVar(&o.Name, "budget", "", "join the fleet budget NAME (hfsent budget set): this process's calls in flight and calls per second count against its cap and rate, below -c and --rps; needs --db or $"+dbEnv)
	fs.DurationVar(&o.Lease, "budget-lease", time.Second, "with --budget: how long a share holds without a renewal (renewed every quarter of it); past it no new call is sent ("+rangeHelp(minBudgetLease, maxBudgetLease)+")")
	fs.DurationVar(&o.SafeFor, "budget-safe-for", 30*time.Second, "with --budget: how long past its lease a member that cannot renew (its database away) goes on sending on its safe share, the cap divided by the members and at most its share; the budget keeps that much for it as long, plus --timeout (0: no safe share, nothing is sent once the lease ends; "+rangeHelp(minBudgetSafeFor, maxBudgetSafeFor)+")")
	fs.IntVar(&o.SafeShare, "budget-safe-share", 0, "with --budget: the calls in flight this process may send while it starts with its database away, until its first renewal (0: none, it sends nothing until then); the slots must be free: no other member may hold them (at most the cap)")
}

// budgets is where the stages' fleet budgets are: classify's and
// serve's --db (opened on a stage's first need, closed after), or the
// worker's queue database.
type budgets struct {
	dbo  *dbOptions
	db   *queue.DB
	kind budget.Kind
	own  bool // db was opened here
}

// checkDB refuses --db when no stage joins a budget (classify and serve
// take it for --budget alone).
func (o *providerOptions) checkDB(dbo *dbOptions) error {
	for _, c := range o.stages {
		if c.Budget.Name != "" {
			return nil
		}
	}
	if dbo != nil && dbo.url != "" {
		return usageErrorf("--db is for --budget here: name the budget to join, or leave --db out")
	}
	return nil
}

// join makes the process a member of a stage's budget (stage.Deps.Join),
// charging its ledger to it.
func (b *budgets) join(ctx context.Context, ios *IOStreams, log *slog.Logger, ledger *spend.Ledger) func(context.Context, stage.Budget, int, time.Duration) (*budget.Member, func(bool), error) {
	if b == nil {
		return nil
	}
	return func(ctx context.Context, bud stage.Budget, max int, timeout time.Duration) (*budget.Member, func(bool), error) {
		if b.db == nil {
			db, err := openBudgetDB(ctx, ios, log, b.dbo)
			if err != nil {
				return nil, nil, err
			}
			b.db, b.own = db, true
		}
		host, _ := os.Hostname()
		m, err := budget.Join(ctx, budget.NewStore(b.db.Pool), budget.MemberConfig{
			Budget: bud.Name, Kind: b.kind, Max: max, Timeout: timeout,
			Lease: bud.Lease, Host: host, PID: os.Getpid(), Logger: log, Ledger: ledger,
			SafeFor: bud.SafeFor, SafeShare: bud.SafeShare,
		})
		if err != nil {
			return nil, nil, budgetError(fmt.Errorf("--budget: %w", err))
		}
		return m, m.Close, nil
	}
}

// close closes the database the budgets opened.
func (b *budgets) close() {
	if b != nil && b.own && b.db != nil {
		b.db.Close()
		b.db, b.own = nil, false
	}
}

// startMembers starts the renewals of each stage's budget member, with
// its guard, before any call: a set-up error, as a database that cannot
// be reached is for the queue.
func (o *providerOptions) startMembers(ctx context.Context, log *slog.Logger) error {
	for _, s := range o.opened {
		if s.Member == nil {
			continue
		}
		name := s.Config.Budget.Name
		if err := s.Member.Start(ctx, s.Guard); err != nil {
			return usageErrorf("joining --budget %s: %s", queue.Printable(name), queue.Summarise(err))
		}
		log.Info("joined the budget", "budget", name, "member", s.Member.ID(), "share", s.Member.Snapshot().Share)
	}
	return nil
}

// openBudgetDB opens the database of a member's budget: one that cannot be
// reached is opened all the same (the member starts on its safe share, or
// waits: budget.Member.Start), its schema checked by the renewals.
func openBudgetDB(ctx context.Context, ios *IOStreams, log *slog.Logger, dbo *dbOptions) (*queue.DB, error) {
	db, err := dbo.open(ctx, ios, false, true)
	if err == nil || !errors.Is(err, queue.ErrConnect) {
		return db, err
	}
	log.Warn("the budget's database cannot be reached at start", "err", queue.Summarise(err))
	return queue.OpenLazy(ctx, dbo.url)
}

// fleetShare is the member's state for serve's /metrics.
func fleetShare(m *budget.Member) func() serve.FleetShare {
	return func() serve.FleetShare {
		s := m.Snapshot()
		return serve.FleetShare{Share: s.Share, Demand: s.Demand, InFlight: s.InFlight, RPS: s.RPS, LeaseHeld: s.LeaseHeld,
			Paused: s.Paused, Open: s.Open, Renewals: s.Renewals, Failures: s.Failures, Safe: s.Safe, OnSafe: s.OnSafe}
	}
}
