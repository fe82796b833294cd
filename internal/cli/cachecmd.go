package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/queue"
	"github.com/hfsent/hfsent/internal/results"
	"github.com/hfsent/hfsent/internal/serve"
)

// cacheCmdOptions are the cache commands' flags: which cache.
type cacheCmdOptions struct {
	cacheDir  string
	db        string
	olderThan ageFlag
}

func newCacheCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Look at or empty the response cache: stats, clear",
		Long: `classify, serve and worker keep every final, usable answer (success, and a
fallback's under its own key) in a response cache, under the key of the
request that got it: the provider kind, the model, the URL without its
credentials and the body as sent. A row whose request is there is answered
without a call (cached true, attempts 0). On one machine the cache is one
file in --cache-dir (default: the user's cache directory/hfsent); with --db
it is the table hfsent.cache in that PostgreSQL, shared by the fleet.`,
		Example: `  hfsent cache stats
  hfsent cache clear --older-than 30d
  hfsent cache stats --db postgres://hfsent@db.internal:5432/hfsent`,
	}
	cmd.AddCommand(newCacheStatsCmd(ios, g), newCacheClearCmd(ios, g))
	return cmd
}

func addCacheCmdFlags(fs *pflag.FlagSet, o *cacheCmdOptions) {
	fs.StringVar(&o.cacheDir, "cache-dir", "", "the cache's directory (default: the user's cache directory/hfsent, e.g. ~/.cache/hfsent)")
	fs.StringVar(&o.db, "db", "", "the fleet's cache in this PostgreSQL instead (a URL, or key=value settings)")
}

func newCacheStatsCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &cacheCmdOptions{}
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show the response cache: entries, size, hits, and the tokens and cost its hits saved",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			return runCacheStats(cmd.Context(), o, ios)
		},
	}
	addCacheCmdFlags(cmd.Flags(), o)
	return cmd
}

func newCacheClearCmd(ios *IOStreams, g *globalOptions) *cobra.Command {
	o := &cacheCmdOptions{}
	cmd := &cobra.Command{
		Use:   "clear",
		Short: "Empty the response cache, or drop the entries older than --older-than",
		Long: `clear drops every entry of the response cache, or with --older-than D those
stored more than D ago (e.g. 36h, 30d). A cache file found damaged, or written
by a newer hfsent, is removed whole and made anew on the next run (clear
without --older-than): its answers are lost, and are asked again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := g.logger(ios); err != nil {
				return err
			}
			return runCacheClear(cmd.Context(), o, ios)
		},
	}
	addCacheCmdFlags(cmd.Flags(), o)
	cmd.Flags().Var(&o.olderThan, "older-than", "drop only the entries stored more than this long ago: a duration such as 36h, or days such as 30d")
	return cmd
}

// store opens the cache the flags name.
func (o *cacheCmdOptions) store(ctx context.Context, ios *IOStreams) (cache.Store, func(), error) {
	if o.db != "" {
		if o.cacheDir != "" {
			return nil, nil, usageErrorf("--db and --cache-dir name two caches; give one")
		}
		db, err := queue.Open(ctx, o.db)
		if err != nil {
			return nil, nil, queueError(err)
		}
		if err := db.Check(ctx); err != nil {
			db.Close()
			return nil, nil, queueError(err)
		}
		return cache.NewPG(db.Pool, db.URL(), 0), db.Close, nil
	}
	dir, err := o.dir(ios)
	if err != nil {
		return nil, nil, err
	}
	f, err := cache.OpenFile(ctx, dir, 0)
	if err != nil {
		return nil, nil, &openError{err: err, dir: dir}
	}
	return f, func() { f.Close() }, nil
}

// openError is a cache file that could not be opened, before it is worded
// for the user (cacheOpenError): clear removes a damaged one.
type openError struct {
	err error
	dir string
}

func (e *openError) Error() string { return cacheOpenError(e.err, e.dir).Error() }

// worded is the error as the user is told it.
func worded(err error) error {
	var oe *openError
	if errors.As(err, &oe) {
		return cacheOpenError(oe.err, oe.dir)
	}
	return err
}

func (o *cacheCmdOptions) dir(ios *IOStreams) (string, error) {
	if o.cacheDir != "" {
		return o.cacheDir, nil
	}
	if d := defaultCacheDir(ios.getenv); d != "" {
		return d, nil
	}
	return "", usageErrorf("no cache directory (HOME is not set): give --cache-dir DIR")
}

func runCacheStats(ctx context.Context, o *cacheCmdOptions, ios *IOStreams) error {
	s, closeStore, err := o.store(ctx, ios)
	if err != nil {
		return worded(err)
	}
	defer closeStore()
	st, err := s.Stats(ctx)
	if err != nil {
		return statsError(err, s.Name())
	}
	w := ios.Out
	fmt.Fprintf(w, "cache    %s\n", st.Name)
	fmt.Fprintf(w, "entries  %d\n", st.Entries)
	fmt.Fprintf(w, "size     %s\n", serve.ShowBytes(st.Bytes))
	if st.Entries > 0 {
		fmt.Fprintf(w, "stored   %s to %s\n", st.Oldest.UTC().Format(time.RFC3339), st.Newest.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "hits     %d\n", st.Hits)
	saved := fmt.Sprintf("prompt_tokens=%d completion_tokens=%d", st.SavedPrompt, st.SavedCompletion)
	if st.Costed {
		saved += " cost_usd=" + results.FormatUSD(st.SavedUSD)
	}
	fmt.Fprintf(w, "saved    %s\n", saved)
	return nil
}

func statsError(err error, name string) error {
	if errors.Is(err, cache.ErrDamaged) {
		return usageErrorf("cache %s: %v: run `hfsent cache clear` (with the same --cache-dir) to start a new one", name, err)
	}
	return fmt.Errorf("cache %s: %s", name, queue.Summarise(err))
}

func runCacheClear(ctx context.Context, o *cacheCmdOptions, ios *IOStreams) error {
	s, closeStore, err := o.store(ctx, ios)
	if err != nil {
		// A file that cannot be opened as a cache is removed whole, when
		// the whole cache is to go.
		var oe *openError
		if !errors.As(err, &oe) || o.olderThan.d > 0 ||
			!(errors.Is(oe.err, cache.ErrDamaged) || errors.Is(oe.err, cache.ErrNewer) || errors.Is(oe.err, cache.ErrForeign)) {
			return worded(err)
		}
		if rerr := cache.RemoveFile(oe.dir); rerr != nil {
			return fmt.Errorf("removing the cache in %s: %v", oe.dir, unwrapPathError(rerr))
		}
		fmt.Fprintf(ios.Out, "removed the cache file in %s (%v); a new one is made on the next run\n", oe.dir, oe.err)
		return nil
	}
	defer closeStore()
	var before time.Time
	if o.olderThan.d > 0 {
		before = time.Now().Add(-o.olderThan.d)
	}
	n, err := s.Clear(ctx, before)
	if err != nil {
		return statsError(err, s.Name())
	}
	what := "every entry"
	if !before.IsZero() {
		what = "the entries older than " + o.olderThan.String()
	}
	fmt.Fprintf(ios.Out, "cleared %s of %s: %d removed\n", what, s.Name(), n)
	return nil
}

// ageFlag is a duration that may also be given in days (30d).
type ageFlag struct{ d time.Duration }

func (a *ageFlag) String() string {
	if a.d > 0 && a.d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(a.d/(24*time.Hour)), 10) + "d"
	}
	return shortDuration(a.d)
}

func (a *ageFlag) Set(v string) error {
	v = strings.TrimSpace(v)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 1 || n > 36500 {
			return fmt.Errorf("want a number of days between 1 and 36500, such as 30d")
		}
		a.d = time.Duration(n) * 24 * time.Hour
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second || d > 36500*24*time.Hour {
		return fmt.Errorf("want a duration such as 36h, or days such as 30d")
	}
	a.d = d
	return nil
}

func (a *ageFlag) Type() string { return "age" }
