package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"regexp"
	"regexp/syntax"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/budget"
	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/serve"
	"github.com/hfsent/hfsent/internal/stage"
)

type serveOptions struct {
	addr           string
	prov           providerOptions
	db             dbOptions // --db, for --budget
	eng            engineOptions
	cost           costOptions
	requestTimeout time.Duration
	grace          time.Duration
	maxChars       int
	maxIDChars     int
	idPattern      string
	maxBody        byteSize
	bodyBudget     byteSize
	maxItems       int
	maxConns       int
	batchWait      time.Duration
	shed           bool
	noShed         bool
	qual           qualityOptions
	configFile     string
	flags          *pflag.FlagSet // which flags were given
}

// serveProvider is serve's use of the provider flags: a request waits
// briefly for a slot and is retried once, within its --request-timeout
// (which is its deadline: --row-deadline is classify's).
var serveProvider = providerUse{
	admissionWait:     serve.DefaultAdmissionWait,
	admissionWaitHelp: "how long a request may wait for a free provider slot; past it the answer is 503 local_capacity, at once, and nothing is sent (0: wait up to --request-timeout; at most --request-timeout)",
	retries:           serve.DefaultRetries,
	retriesHelp:       "retries after a failure that may recover (connection errors, timeouts, 429, 500/502/503/504), within --request-timeout (" + rangeHelp(0, maxRetries) + "; few in a server: callers wait, and retries multiply the load on a failing provider)",
	fallbackHelp:      "model id, or local, that answers requests while the breaker is open, and requests whose calls failed after their retries (default: none, requests are answered 503 circuit_open at once)",
	noRowDeadline:     true,
}

// serveEngine is serve's wording of the engine's flags.
var serveEngine = engineUse{
	batchSizeHelp: "most texts in one provider call: requests that arrive while the slots are busy ride together (1: off; " + rangeHelp(1, maxBatchSize) + ")",
	dedupeHelp:    "identical texts in flight share one call, and recent answers are reused",
	noDedupeHelp:  "send every text, even identical ones",
}

// Bounds of serve's own flags.
const (
	minMaxBody, maxMaxBody = 1 << 10, 64 << 20
	minBodyBudget          = 1 << 20
	maxBodyBudget          = 64 << 30
	maxItemsLimit          = 10_000
	maxConnsLimit          = 1_000_000
	maxIDCharsLimit        = 10_000
	maxGrace               = time.Hour
	maxBatchWait           = 10 * time.Second
)

func newServeCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &serveOptions{
		maxBody:    byteSize{n: serve.DefaultMaxBody, lo: minMaxBody, hi: maxMaxBody},
		bodyBudget: byteSize{n: serve.DefaultBodyBudget, lo: minBodyBudget, hi: maxBodyBudget},
	}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the classifier over HTTP, with admission control",
		Long: `Serve answers POST /feedback-sentiment {"request_id", "text"} with
{"request_id", "label", "score", "model"}, and POST /v1/classify
{"items": [...]} with one result per item, through the same guarded client,
rules and outcome table as classify. GET /healthz, /readyz, /metrics
(Prometheus) and /openapi.json describe it.

Errors answer {"detail": {"code", "message"}} with the status of the code
(the outcome table in the README; 422 for validation, naming the field).
A request that gets no provider slot within --admission-wait is answered 503
local_capacity at once, and never sent; every 503 carries Retry-After.
--request-timeout bounds a request from arrival to answer: admission, every
attempt, backoff and cooldown. A request never waits for an open breaker:
without --fallback-model (or a later --cascade stage) it is answered 503
circuit_open. With --cascade FILE, a request goes through the file's
stages as a classify row does (docs/guides/cascade.md); --config FILE
sets any flag by its long name.

-c and --rps are per process: four processes with -c 3 may send 12 calls at
once. Split a provider budget by giving each process its share.

SIGTERM or SIGINT turns /readyz to 503, closes the listener, lets requests in
flight finish for up to --grace, and exits 0; a second signal exits 130 at
once. Access logs go to stderr (--log-format text|json), one line per
request: never the text, never the token.`,
		Example: `  # offline, no token: the embedded model
  hfsent serve --provider local
  curl -s localhost:8000/feedback-sentiment -H 'Content-Type: application/json' \
    -d '{"request_id": "r1", "text": "I love it"}'

  # the Hugging Face API, 16 calls in flight, on every interface
  HF_TOKEN=hf_... hfsent serve --addr 0.0.0.0:8000 -c 16 --log-format json

  # a provider that answers many texts per call: requests that arrive while
  # the slots are busy ride together, up to 16 a call
  hfsent serve --endpoint http://127.0.0.1:8080/ -c 4 --batch-size 16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return withConfig(cmd, ios, g, o.configFile, func(log *slog.Logger) error { return runServe(cmd.Context(), o, ios, log) })
		},
	}
	fs := cmd.Flags()
	o.flags = fs
	addConfigFlag(fs, &o.configFile)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8000", "HOST:PORT to listen on (0.0.0.0:8000: every interface; port 0: any free port, logged)")
	addProviderFlags(fs, &o.prov, serveProvider)
	addDBFlags(fs, &o.db, false)
	addEngineFlags(fs, &o.eng, serveEngine)
	addCacheFlags(fs, &o.cost)
	addPriceFlags(fs, &o.prov.Config)
	addQualityFlags(fs, &o.qual, serviceQuality, &o.prov.Config)
	fs.DurationVar(&o.requestTimeout, "request-timeout", serve.DefaultRequestTimeout, "bounds one request from its arrival to its answer: admission, every attempt, backoff and cooldown ("+rangeHelp(minTimeout, maxTimeout)+")")
	fs.DurationVar(&o.grace, "grace", serve.DefaultGrace, "on SIGTERM or SIGINT, how long requests in flight may finish before they are cancelled ("+rangeHelp(minTimeout, maxGrace)+")")
	fs.IntVar(&o.maxChars, "max-chars", 5000, "longer texts are 422 invalid_input ("+rangeHelp(1, maxCharsLimit)+")")
	fs.IntVar(&o.maxIDChars, "max-id-chars", 128, "longer request ids are 422 invalid_input ("+rangeHelp(1, maxIDCharsLimit)+")")
	fs.StringVar(&o.idPattern, "id-pattern", "", "regular expression (RE2) a request id must match in full, e.g. '[A-Za-z0-9_-]+' (default: any non-blank id)")
	fs.Var(&o.maxBody, "max-body", "largest request body, in bytes or with KiB or MiB; larger is 413 ("+show(minMaxBody/1024)+"KiB-"+show(maxMaxBody>>20)+"MiB)")
	fs.Var(&o.bodyBudget, "body-budget", "bytes that request bodies being read, decoded and answered may hold at once, over all requests: a body takes 3 times its size (its Content-Length, else --max-body) plus 64KiB before it is read, and keeps its size plus 64KiB until answered; a request that does not fit is answered 503 at once, its body unread (at least 3 x --max-body + 64KiB, raised to that when not given; "+serve.ShowBytes(minBodyBudget)+"-"+serve.ShowBytes(maxBodyBudget)+")")
	fs.IntVar(&o.maxItems, "max-items", serve.DefaultMaxItems, "most items in one POST /v1/classify ("+rangeHelp(1, maxItemsLimit)+")")
	fs.IntVar(&o.maxConns, "max-conns", serve.DefaultMaxConns, "connections open at once; past it a new one is answered 503 at once and closed (each may hold about 128KiB: headers read slowly) ("+rangeHelp(1, maxConnsLimit)+")")
	fs.DurationVar(&o.batchWait, "batch-wait", serve.DefaultBatchWait, "with --batch-size, how long a call that is not full waits for more texts, never past a request's --admission-wait ("+rangeHelp(minTimeout, maxBatchWait)+")")
	fs.BoolVar(&o.shed, "shed", true, "for "+shortDuration(engine.ShedAfter)+" (or four calls' latency) after a request got no slot within --admission-wait, requests wait at most "+shortDuration(engine.ShedWait)+" for one: under a sustained overload the requests admitted are not all late by the whole wait; a burst still gets it")
	fs.BoolVar(&o.noShed, "no-shed", false, "always let a request wait the whole --admission-wait, even in a standing queue (e.g. with a long --admission-wait meant to queue)")
	return cmd
}

func (o *serveOptions) validate() error {
	if o.flags.Changed("row-deadline") {
		return usageErrorf("--row-deadline is classify's; serve bounds each request with --request-timeout")
	}
	if err := o.prov.setup(); err != nil {
		return err
	}
	if err := o.prov.checkDB(&o.db); err != nil {
		return err
	}
	if err := o.prov.eachStage(func(c *stage.Config) error {
		return refuse(c.Given != nil && c.Given("row-deadline") && o.prov.file != nil, "row-deadline is classify's; serve bounds each request with --request-timeout")
	}); err != nil {
		return err
	}
	if err := o.cost.validate(&o.prov); err != nil {
		return err
	}
	for _, err := range []error{
		inRange("--request-timeout", o.requestTimeout, minTimeout, maxTimeout, ""),
		inRange("--grace", o.grace, minTimeout, maxGrace, ""),
		inRange("--max-chars", o.maxChars, 1, maxCharsLimit, ""),
		inRange("--max-id-chars", o.maxIDChars, 1, maxIDCharsLimit, ""),
		inRange("--max-items", o.maxItems, 1, maxItemsLimit, ""),
		inRange("--max-conns", o.maxConns, 1, maxConnsLimit, ""),
		inRange("--batch-wait", o.batchWait, minTimeout, maxBatchWait, ""),
	} {
		if err != nil {
			return err
		}
	}
	if need := serve.MinBodyBudget(o.maxBody.n); o.bodyBudget.n < need {
		if o.flags.Changed("body-budget") {
			return usageErrorf("--body-budget %s cannot hold one body of --max-body %s, which is read and decoded in up to 3 times its size plus 64KiB: give at least %s",
				o.bodyBudget.String(), o.maxBody.String(), serve.ShowBytes(need))
		}
		o.bodyBudget.n = need
	}
	if wait := o.prov.first().AdmissionWait; wait > o.requestTimeout {
		return usageErrorf("--admission-wait %s is longer than --request-timeout %s: a request's wait for a slot is part of its deadline",
			shortDuration(wait), shortDuration(o.requestTimeout))
	}
	for _, err := range []error{
		o.eng.validate(&o.prov),
		// --shed is on by default: it contradicts --no-shed only when given.
		contradict("--shed", "--no-shed", o.flags.Changed("shed") && o.shed && o.noShed),
	} {
		if err != nil {
			return err
		}
	}
	if _, err := o.idRegexp(); err != nil {
		return err
	}
	if strings.TrimSpace(o.addr) == "" {
		return usageErrorf("--addr must be HOST:PORT, e.g. 127.0.0.1:8000")
	}
	return o.qual.validate(false)
}

// idRegexp compiles --id-pattern to match a whole id.
func (o *serveOptions) idRegexp() (*regexp.Regexp, error) {
	if o.idPattern == "" {
		return nil, nil
	}
	re, err := regexp.Compile(`^(?:` + o.idPattern + `)$`)
	if err != nil {
		return nil, usageErrorf("--id-pattern %q is not a valid regular expression: %v", o.idPattern, regexpCause(err))
	}
	return re, nil
}

func regexpCause(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return se.Code.String()
	}
	return err.Error()
}

func runServe(ctx context.Context, o *serveOptions, ios *IOStreams, log *slog.Logger) error {
	if err := o.validate(); err != nil {
		return err
	}
	idRE, _ := o.idRegexp()
	if err := o.prov.prepare(log); err != nil {
		return err
	}
	counters := &resilience.Counters{}
	metrics := serve.NewMetrics(counters)
	if err := o.cost.ledger(&o.prov); err != nil {
		return err
	}
	leave, err := o.prov.openStages(ctx, ios, log, &budgets{dbo: &o.db, kind: budget.KindServe}, counters)
	if err != nil {
		return err
	}
	// Run once the server has drained: no call is in flight any more.
	defer leave(true)
	guard := o.prov.guard()
	rc, closeDB, err := o.cost.openCache(ctx, ios, log, &o.prov, nil, o.db.url)
	if err != nil {
		return err
	}
	defer closeDB()
	// Closed once the server has drained: its last answers are kept.
	defer closeCache(log, rc)
	if m := o.prov.member(); m != nil {
		metrics.WatchBudget(fleetShare(m))
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return usageErrorf("cannot listen on --addr %s: %v", o.addr, unwrapListenError(err))
	}
	pc := o.eng.config(&o.prov, "serve")
	pc.Rules = engine.Rules{MaxChars: o.maxChars, MaxIDChars: o.maxIDChars, IDPattern: idRE}
	pc.BatchWait = o.batchWait
	// A standing queue only makes every answer late.
	pc.ShedStandingQueue = o.shed && !o.noShed
	pc.Cache, pc.Stages = rc, o.prov.opened.Engine(rc, o.qual.answers(&o.prov))
	srv := serve.New(guard, metrics, serve.Config{
		Pipeline:       pc,
		RequestTimeout: o.requestTimeout,
		Grace:          o.grace,
		MaxBody:        o.maxBody.n,
		BodyBudget:     o.bodyBudget.n,
		MaxConns:       o.maxConns,
		MaxItems:       o.maxItems,
		Version:        version,
		Stage:          o.prov.file != nil,
		Extra:          o.qual.extra(&o.prov),
		Logger:         log,
	})
	// The bodies and the connections are bounded: so is the heap, and the
	// collector is told, so that garbage does not double it (GOMEMLIMIT,
	// when set, is the operator's).
	memLimit := serve.MemoryLimit(o.bodyBudget.n, o.maxConns)
	if ios.getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memLimit)
	}
	ctx, stopSignals := serveSignals(ctx, ios, log, o.grace)
	defer stopSignals()
	// Logged once the signals are caught: from here a SIGTERM drains.
	first := o.prov.first()
	log.Info("listening", "addr", ln.Addr().String(), "provider", first.Provider, "model", guard.Model(), "stages", len(o.prov.stages),
		"concurrency", first.Concurrency, "admission_wait", first.AdmissionWait, "retries", first.Retries,
		"request_timeout", o.requestTimeout, "batch_size", o.eng.batchSize, "body_budget", o.bodyBudget.String(),
		"max_conns", o.maxConns, "memory_limit", serve.ShowBytes(memLimit))
	if err := srv.Run(ctx, ln); err != nil {
		return &exitError{code: ExitServeFailed, err: err}
	}
	return nil
}

func unwrapListenError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err
	}
	return err
}

// serveSignals ends ctx on the first SIGINT or SIGTERM (the drain); a
// second one exits at once.
func serveSignals(parent context.Context, ios *IOStreams, log *slog.Logger, grace time.Duration) (context.Context, func()) {
	return watchSignals(parent, []os.Signal{os.Interrupt, syscall.SIGTERM}, func(s os.Signal) {
		log.Warn("received "+s.String()+": draining (up to --grace "+shortDuration(grace)+"); send it again to quit now", "signal", s.String())
	}, func() {
		fmt.Fprintln(ios.ErrOut, "hfsent: second signal: quitting now")
		if ios.HardExit != nil {
			ios.HardExit(ExitInterrupted)
		}
	})
}

// byteSize is a flag holding a number of bytes within [lo, hi]: 1048576,
// 512KiB, 1MiB, 1GiB.
type byteSize struct{ n, lo, hi int64 }

func (b *byteSize) String() string { return serve.ShowBytes(b.n) }

func (b *byteSize) Set(v string) error {
	s := strings.TrimSpace(v)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > b.hi/mult || n*mult < b.lo {
		return fmt.Errorf("want a size between %s and %s, such as 1MiB or 65536", serve.ShowBytes(b.lo), serve.ShowBytes(b.hi))
	}
	b.n = n * mult
	return nil
}

func (b *byteSize) Type() string { return "size" }
