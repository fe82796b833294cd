package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/provider"
	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/resilience"
	"github.com/hfsent/hfsent/internal/spend"
)

// costOptions are the response cache's flags (--cache-dir, --no-cache,
// --cache-max-size) and the spend's (--price-in, --price-out, --prices,
// and, for a batch, --max-spend) that classify, serve and the worker
// share.
type costOptions struct {
	cacheDir string
	noCache  bool
	cacheMax byteSize
	priceIn  float64
	priceOut float64
	prices   string
	maxSpend float64

	flags *pflag.FlagSet
}

// Bounds of the cost flags.
const (
	maxPrice    = 1_000_000 // USD per million tokens
	maxSpendCap = 1e9       // USD
	maxCacheMax = 1 << 40
	// defaultCacheMax is --cache-max-size's default: about five million
	// entries of a chat model's answers.
	defaultCacheMax = 1 << 30
)

func addCacheFlags(fs *pflag.FlagSet, o *costOptions) {
	o.flags = fs
	o.cacheMax = byteSize{n: defaultCacheMax, lo: cache.MinMaxBytes, hi: maxCacheMax}
	fs.StringVar(&o.cacheDir, "cache-dir", "", "where the response cache lives: a row whose request was answered before (the same kind, model, URL and body) is answered from it without a call (default: with --db, that database's, shared by the fleet; else the user's cache directory/hfsent, e.g. ~/.cache/hfsent)")
	fs.BoolVar(&o.noCache, "no-cache", false, "neither read nor write the response cache: every row is sent")
	fs.Var(&o.cacheMax, "cache-max-size", "the most the response cache may hold on disk, oldest entries out first (1MiB-1024GiB, e.g. 512MiB)")
}

func addPriceFlags(fs *pflag.FlagSet, o *costOptions, maxSpend bool) {
	o.flags = fs
	fs.Float64Var(&o.priceIn, "price-in", 0, "USD per million prompt tokens, to price each call's reported usage (cost_usd); with --price-out ("+rangeHelp(0.0, float64(maxPrice))+")")
	fs.Float64Var(&o.priceOut, "price-out", 0, "USD per million completion tokens; with --price-in")
	fs.StringVar(&o.prices, "prices", "", "a price file in LiteLLM's model_prices_and_context_window.json format, priced by --model (input_cost_per_token, output_cost_per_token); instead of --price-in/--price-out")
	if maxSpend {
		fs.Float64Var(&o.maxSpend, "max-spend", 0, "stop sending once what was spent plus the estimates of the calls in flight would pass this many USD; the rest are not_attempted (0: no limit, else "+rangeHelp(0.000001, float64(maxSpendCap))+"; needs prices)")
	}
}

// pricesGiven reports whether any price flag was given.
func (o *costOptions) pricesGiven() bool {
	return o.flags.Changed("price-in") || o.flags.Changed("price-out") || o.prices != ""
}

// validate checks the cost flags against the provider's.
func (o *costOptions) validate(prov *providerOptions) error {
	kind, _ := provider.KindOf(prov.provider)
	in, out := o.flags.Changed("price-in"), o.flags.Changed("price-out")
	for _, err := range []error{
		inRange("--price-in", o.priceIn, 0, maxPrice, ""),
		inRange("--price-out", o.priceOut, 0, maxPrice, ""),
		inRange("--max-spend", o.maxSpend, 0.000001, maxSpendCap, "no limit"),
		refuse(in != out, "--price-in and --price-out go together: a price for one kind of token only would guess the other"),
		refuse((in || out) && o.prices != "", "--prices and --price-in/--price-out contradict each other; give one"),
		refuse(o.pricesGiven() && !kind.Chat, "--price-in, --price-out and --prices price the usage a chat model reports (--provider chat); --provider %s reports none", prov.provider),
		refuse(o.maxSpend > 0 && !o.pricesGiven(), "--max-spend needs the prices of the tokens: --price-in and --price-out (USD per million), or --prices FILE"),
		contradict("--cache-dir", "--no-cache", o.noCache && o.cacheDir != ""),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// ledger is what the run's calls are charged to: with the prices the
// flags give, or none (then only a cost the server reports is counted);
// nil for a provider that reports no usage.
func (o *costOptions) ledger(prov *providerOptions) (*spend.Ledger, error) {
	kind, _ := provider.KindOf(prov.provider)
	if !kind.Chat {
		return nil, nil
	}
	var ps spend.Prices
	switch {
	case o.prices != "":
		var err error
		if ps, err = spend.LoadFile(o.prices); err != nil {
			return nil, usageErrorf("--prices: %v", unwrapPathError(err))
		}
		if _, ok := ps.For(prov.model); !ok {
			return nil, usageErrorf("--prices %s has no price for --model %s (looked up as given, and without a :provider suffix): add its entry, or give --price-in and --price-out", o.prices, prov.model)
		}
	case o.flags.Changed("price-in"):
		ps = spend.Flat(o.priceIn, o.priceOut)
	}
	return spend.NewLedger(ps, o.maxSpend), nil
}

// tune gives the guard the ledger.
func tuneLedger(l *spend.Ledger) func(*resilience.Config) {
	return func(c *resilience.Config) { c.Ledger = l }
}

// defaultCacheDir is the user's cache directory, as os.UserCacheDir finds
// it but from the streams' environment, then hfsent; "" when there is none.
func defaultCacheDir(getenv func(string) string) string {
	var base string
	switch runtime.GOOS {
	case "windows":
		base = getenv("LocalAppData")
	case "darwin", "ios":
		if h := getenv("HOME"); h != "" {
			base = filepath.Join(h, "Library", "Caches")
		}
	default:
		base = getenv("XDG_CACHE_HOME")
		if !filepath.IsAbs(base) {
			base = ""
			if h := getenv("HOME"); h != "" {
				base = filepath.Join(h, ".cache")
			}
		}
	}
	if base == "" {
		return ""
	}
	return filepath.Join(base, "hfsent")
}

// openCache opens the response cache the flags ask for: the file in
// --cache-dir when it is given, else in the database when there is one
// (db: the worker's, or url: --db of a budget member), else the file in
// the default directory. nil, nil: no cache (--no-cache, the
// embedded model, or no cache directory at all).
func (o *costOptions) openCache(ctx context.Context, ios *IOStreams, log *slog.Logger, prov *providerOptions, db *queue.DB, url string) (*cache.Cache, func(), error) {
	noop := func() {}
	if kind, _ := provider.KindOf(prov.provider); o.noCache || !kind.Remote {
		return nil, noop, nil
	}
	advice := "run `hfsent cache clear` (add the same --cache-dir), or pass --no-cache"
	if o.cacheDir != "" {
		db, url = nil, "" // a file asked for by name, even beside a database
	}
	if db == nil && url != "" {
		var err error
		if db, err = queue.Open(ctx, url); err != nil {
			return nil, noop, queueError(err)
		}
		closeDB := db.Close
		c, err := o.pgCache(ctx, log, db, advice)
		if err != nil {
			closeDB()
			return nil, noop, err
		}
		return c, closeDB, nil
	}
	if db != nil {
		c, err := o.pgCache(ctx, log, db, advice)
		return c, noop, err
	}
	dir := o.cacheDir
	if dir == "" {
		if dir = defaultCacheDir(ios.getenv); dir == "" {
			log.Warn("no cache directory (HOME is not set): the response cache is off; give --cache-dir DIR to use one")
			return nil, noop, nil
		}
	}
	f, err := cache.OpenFile(ctx, dir, o.cacheMax.n)
	switch {
	case errors.Is(err, cache.ErrDamaged), errors.Is(err, cache.ErrForeign), errors.Is(err, cache.ErrNewer):
		// Its answers may be wanted: the user decides.
		return nil, noop, cacheOpenError(err, dir)
	case err != nil:
		// A directory that cannot be written, a full disk: the run goes on
		// without the cache, which only ever spares calls.
		log.Warn("the response cache cannot be opened: this run makes every call; give another --cache-dir, or pass --no-cache",
			"dir", dir, "err", unwrapPathError(err).Error())
		return nil, noop, nil
	}
	return cache.New(f, cache.Options{Logger: log, Advice: advice}), noop, nil
}

// openGuarded opens the guarded provider the flags ask for (prov.open),
// then the response cache beside it (openCache: dbURL is a budget member's
// --db); closeDB closes what the cache holds open, after the cache.
func (o *costOptions) openGuarded(ctx context.Context, ios *IOStreams, log *slog.Logger, prov *providerOptions, counters *resilience.Counters, dbURL string) (*resilience.Guard, *cache.Cache, func(), error) {
	guard, err := prov.open(ios, log, counters)
	if err != nil {
		return nil, nil, nil, err
	}
	rc, closeDB, err := o.openCache(ctx, ios, log, prov, nil, dbURL)
	if err != nil {
		return nil, nil, nil, err
	}
	return guard, rc, closeDB, nil
}

func (o *costOptions) pgCache(ctx context.Context, log *slog.Logger, db *queue.DB, advice string) (*cache.Cache, error) {
	if err := db.Check(ctx); err != nil {
		return nil, queueError(err)
	}
	return cache.New(cache.NewPG(db.Pool, db.URL(), o.cacheMax.n), cache.Options{Logger: log, Advice: advice}), nil
}

// cacheOpenError names the file and the way out of a cache that cannot
// be opened.
func cacheOpenError(err error, dir string) error {
	flag := " --cache-dir " + dir
	switch {
	case errors.Is(err, cache.ErrDamaged), errors.Is(err, cache.ErrForeign):
		return usageErrorf("%v: run `hfsent cache clear%s` to start a new one (its answers are lost), or pass --no-cache", err, flag)
	case errors.Is(err, cache.ErrNewer):
		return usageErrorf("%v: use that hfsent, another --cache-dir, or `hfsent cache clear%s` to start a new one", err, flag)
	}
	return usageErrorf("cannot open the response cache in %s: %v; give another --cache-dir", dir, unwrapPathError(err))
}

// cacheConfig sets the engine's cache: the keys of the primary's requests
// and of the fallback's.
func cacheConfig(cfg *engine.Config, c *cache.Cache, g *resilience.Guard) {
	if c == nil {
		return
	}
	if k, ok := cache.NewKeyer(kindKey(g.Client()), g.Client()); ok {
		cfg.Cache, cfg.Keys = c, &k
	}
	if fb := g.Fallback(); fb != nil && cfg.Keys != nil {
		if k, ok := cache.NewKeyer(kindKey(fb), fb); ok {
			cfg.FallbackKeys = &k
		}
	}
}

// kindKey is the kind of request a client sends, for its key: chat, or
// the request format of the HF client (hf, tei).
func kindKey(c provider.Classifier) string {
	switch v := c.(type) {
	case *provider.Chat:
		return provider.APIChat
	case *provider.HF:
		return v.API()
	}
	return fmt.Sprintf("%T", c)
}

// closeCache writes what the cache holds queued, saying so when it fails.
func closeCache(log *slog.Logger, c *cache.Cache) {
	if c == nil {
		return
	}
	if err := c.Close(context.Background()); err != nil {
		log.Warn("the response cache could not be closed cleanly; its last entries may be missing", "cache", c.Name(), "err", queue.Summarise(err))
	}
}

// spendAdvice is the message of a run stopped by --max-spend.
func spendAdvice(sum engine.Summary, finish string) string {
	t := sum.Spend
	return fmt.Sprintf("--max-spend %s reached: spent %s USD, and the estimate of the next call would have passed it; %d rows not_attempted; %s",
		strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.6f", t.Limit), "0"), "."), fmtUSD(t.Spent), sum.Counts["not_attempted"], finish)
}

func fmtUSD(v float64) string { return strings.TrimSpace(fmt.Sprintf("%.6f", v)) }
