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
	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/stage"
)

// costOptions are the response cache's flags (--cache-dir, --no-cache,
// --cache-max-size) and, for a batch, --max-spend, that classify, serve
// and the worker share (the prices are each stage's: stage.Config).
type costOptions struct {
	cacheDir string
	noCache  bool
	cacheMax byteSize
	maxSpend float64

	flags *pflag.FlagSet
}

// Bounds of the cost flags.
const (
	maxPrice    = stage.MaxPrice // USD per million tokens
	maxSpendCap = 1e9            // USD
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

// addPriceFlags adds the prices of a provider's tokens (classify, serve,
// worker, a --cascade's stage).
func addPriceFlags(fs *pflag.FlagSet, c *stage.Config) {
	fs.Float64Var(&c.PriceIn, "price-in", 0, "USD per million prompt tokens, to price each call's reported usage (cost_usd); with --price-out ("+rangeHelp(0.0, float64(maxPrice))+")")
	fs.Float64Var(&c.PriceOut, "price-out", 0, "USD per million completion tokens; with --price-in")
	fs.Float64Var(&c.PriceCachedIn, "price-cached-in", 0, "USD per million prompt tokens the server read from its prompt cache (usage.prompt_tokens_details.cached_tokens, the cached_prompt_tokens column); with --price-in, which prices them without it ("+rangeHelp(0.0, float64(maxPrice))+")")
	fs.StringVar(&c.Prices, "prices", "", "a price file in LiteLLM's model_prices_and_context_window.json format, priced by --model (input_cost_per_token, output_cost_per_token, cache_read_input_token_cost for cached prompt tokens); instead of --price-in/--price-out")
}

// addSpendFlag adds --max-spend (classify, worker).
func addSpendFlag(fs *pflag.FlagSet, o *costOptions) {
	fs.Float64Var(&o.maxSpend, "max-spend", 0, "stop sending once what was spent plus the estimates of the calls in flight would pass this many USD, every stage's calls counted; the rest are not_attempted (0: no limit, else "+rangeHelp(0.000001, float64(maxSpendCap))+"; needs prices)")
}

// validate checks the cost flags against the run's stages: --max-spend
// needs prices, and in a cascade those of every stage that reports usage.
func (o *costOptions) validate(prov *providerOptions) error {
	if err := inRange("--max-spend", o.maxSpend, 0.000001, maxSpendCap, "no limit"); err != nil {
		return err
	}
	if o.maxSpend > 0 && prov.file == nil && !prov.PricesGiven() {
		return usageErrorf("--max-spend needs the prices of the tokens: --price-in and --price-out (USD per million), or --prices FILE")
	}
	if o.maxSpend > 0 && prov.file != nil {
		priced := false
		for i, c := range prov.stages {
			if k, _ := c.Kind(); k.Chat && !c.PricesGiven() {
				return usageError(prov.place(i, errors.New("--max-spend needs the prices of every stage that reports usage: give this one price-in and price-out (USD per million), or prices FILE")))
			}
			priced = priced || c.PricesGiven()
		}
		if !priced {
			return usageErrorf("--max-spend needs the prices of the tokens: no stage of %s reports usage (a chat stage, with price-in and price-out or prices)", prov.cascadeFile)
		}
	}
	return contradict("--cache-dir", "--no-cache", o.noCache && o.cacheDir != "")
}

// ledger is what every stage's calls are charged to, at the prices each
// stage gives, with --max-spend's limit (stage.Ledger); nil when no stage
// reports usage.
func (o *costOptions) ledger(prov *providerOptions) error {
	l, err := stage.Ledger(prov.stages, o.maxSpend)
	if err != nil {
		return usageError(err)
	}
	prov.ledger = l
	return nil
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
	remote := false
	for _, c := range prov.stages {
		k, _ := c.Kind()
		remote = remote || k.Remote
	}
	if o.noCache || !remote {
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
