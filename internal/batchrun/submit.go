package batchrun

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hfsent/hfsent/internal/batchapi"
	"github.com/hfsent/hfsent/internal/cache"
	"github.com/hfsent/hfsent/internal/engine"
	"github.com/hfsent/hfsent/internal/outcome"
	"github.com/hfsent/hfsent/internal/provider"
)

// lookupChunk is how many candidate rows are asked of the cache at once.
const lookupChunk = 256

type candidate struct {
	seq  int64
	text string
	key  textKey
}

// scan reads INPUT once and submits every row that needs a call: not
// final in the earlier results, valid (the engine's rules), not already
// in a recorded batch, not a text submitted before (with dedupe), not
// answered by the response cache.
func (r *Runner) scan(ctx context.Context) error {
	src, closeSrc, err := r.cfg.Open()
	if err != nil {
		return err
	}
	defer closeSrc()
	ids := engine.NewIDs(r.cfg.Rows)
	defer ids.Release()
	seen := map[textKey]struct{}{}
	up := &uploader{r: r}
	defer up.abandon() // a run stopped mid-file leaves no spool
	var pend []candidate
	for {
		row, err := src.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		prior, err := r.cfg.Prior(row.Seq)
		if err != nil {
			return err
		}
		problem := r.cfg.Rules.Check(row, ids.Seen)
		k := keyOf(row.Text)
		if prior.Final() {
			if prior == outcome.Success && r.cfg.Dedupe {
				seen[k] = struct{}{}
			}
			if s := r.at(row.Seq); s != nil {
				s.used = false // written as it was: its batch's answer is not needed
			}
			continue
		}
		if problem != "" || r.cfg.Chat.CheckText(row.Text) != nil {
			continue
		}
		if s := r.at(row.Seq); s != nil {
			if _, ok := r.byText[k]; !ok {
				r.byText[k] = int32(row.Seq)
			}
			seen[k] = struct{}{}
			continue
		}
		if _, dup := seen[k]; dup && r.cfg.Dedupe {
			continue
		}
		seen[k] = struct{}{}
		if r.cfg.CancelRunning {
			r.stats.NotSent++
			continue
		}
		pend = append(pend, candidate{seq: row.Seq, text: row.Text, key: k})
		if len(pend) == lookupChunk {
			if err := r.submitSome(ctx, up, pend, 1); err != nil {
				return err
			}
			pend = pend[:0]
		}
	}
	if err := r.submitSome(ctx, up, pend, 1); err != nil {
		return err
	}
	return up.finish(ctx)
}

// submitSome writes the candidates the cache does not answer into the
// upload; subs is the submission they are (1: the first).
func (r *Runner) submitSome(ctx context.Context, up *uploader, cs []candidate, subs uint8) error {
	hit := r.cached(ctx, cs)
	for i, c := range cs {
		if hit[i] {
			continue
		}
		if err := up.add(ctx, c, subs); err != nil {
			return err
		}
	}
	return nil
}

// cached says which candidates the response cache holds an answer for:
// the engine answers those from the cache, so they are never submitted.
func (r *Runner) cached(ctx context.Context, cs []candidate) []bool {
	hit := make([]bool, len(cs))
	if r.cfg.Cache == nil || r.cfg.Keys == nil || len(cs) == 0 {
		return hit
	}
	keys := make([]cache.Key, 0, len(cs))
	at := make([]int, 0, len(cs))
	for i, c := range cs {
		if k, ok := r.cfg.Keys.Key(c.text); ok {
			keys, at = append(keys, k), append(at, i)
		}
	}
	got, err := r.cfg.Cache.Store().Get(ctx, keys)
	if err != nil {
		return hit // the engine will miss too: the rows are submitted
	}
	have := make(map[cache.Key]bool, len(got))
	for _, s := range got {
		have[s.Key] = true
	}
	for j, k := range keys {
		hit[at[j]] = have[k]
	}
	return hit
}

// uploader streams request lines into the batch file being uploaded, and
// starts a new batch when the next line would pass --batch-max-requests or
// --batch-max-bytes. One line is in memory at a time.
type uploader struct {
	r    *Runner
	line bytes.Buffer
	cur  *upload
}

// upload is one file on its way to the provider: spooled to a temporary
// file beside the journal, then sent with its Content-Length (as the
// official SDKs send it; a chunked multipart may be refused by the API or
// a proxy in front of it), never held in memory.
type upload struct {
	spool *os.File
	w     *bufio.Writer
	rows  Rows
	n     int64
	bytes int64
}

func (u *uploader) add(ctx context.Context, c candidate, subs uint8) error {
	r := u.r
	_, body, err := r.cfg.Chat.Request(c.text)
	if err != nil {
		return fmt.Errorf("row %d: building its request: %w", c.seq+1, err)
	}
	u.line.Reset()
	n, err := batchapi.NewRequestWriter(&u.line).Write(batchapi.CustomID(int(c.seq)), body)
	if err != nil {
		return err
	}
	if n > r.cfg.MaxBytes {
		r.setError(r.slotFor(c, subs, -1), &provider.Error{Outcome: outcome.InvalidInput,
			Msg: fmt.Sprintf("its request is %d bytes, over --batch-max-bytes %d", n, r.cfg.MaxBytes)})
		return nil
	}
	if u.cur != nil && (u.cur.n+1 > int64(r.cfg.MaxRequests) || u.cur.bytes+n > r.cfg.MaxBytes) {
		if err := u.finish(ctx); err != nil {
			return err
		}
	}
	if u.cur == nil {
		if err := u.start(); err != nil {
			return err
		}
	}
	if _, err := u.cur.w.Write(u.line.Bytes()); err != nil {
		return u.failed(err)
	}
	u.cur.rows.Add(c.seq)
	u.cur.n++
	u.cur.bytes += n
	r.pendText(c, subs)
	return nil
}

// pendText remembers the text's key for a row about to be in a batch.
func (r *Runner) pendText(c candidate, subs uint8) {
	s := r.slotFor(c, subs, -1)
	s.state = pending
}

// slotFor is the slot of c, made if needed, in batch idx (-1: not yet).
func (r *Runner) slotFor(c candidate, subs uint8, idx int) *slot {
	if _, ok := r.byText[c.key]; !ok {
		r.byText[c.key] = int32(c.seq)
	}
	s := r.slotAt(c.seq)
	s.subs, s.batch = subs, int32(idx)
	return s
}

func (u *uploader) start() error {
	f, err := os.CreateTemp(filepath.Dir(u.r.cfg.Journal), ".hfsent-batch-*.jsonl")
	if err != nil {
		return fmt.Errorf("spooling the batch file: %w", err)
	}
	u.cur = &upload{spool: f, w: bufio.NewWriterSize(f, 64<<10)}
	u.r.stats.Uploads++
	return nil
}

// abandon drops the file being spooled, if any.
func (u *uploader) abandon() {
	if u.cur != nil {
		u.cur.drop()
		u.cur = nil
	}
}

// drop closes and removes the spool of cur.
func (cur *upload) drop() {
	_ = cur.spool.Close()
	_ = os.Remove(cur.spool.Name())
}

// failed is a write into the spool that failed.
func (u *uploader) failed(err error) error {
	u.cur.drop()
	u.cur = nil
	return fmt.Errorf("spooling the batch file: %w", err)
}

// finish uploads the spooled file (its size known: sent with its
// Content-Length), removes it, creates its batch and records it.
func (u *uploader) finish(ctx context.Context) error {
	cur := u.cur
	if cur == nil {
		return nil
	}
	u.cur = nil
	defer cur.drop()
	if err := cur.w.Flush(); err != nil {
		return fmt.Errorf("spooling the batch file: %w", err)
	}
	if _, err := cur.spool.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("spooling the batch file: %w", err)
	}
	name := fmt.Sprintf("hfsent-batch-%d.jsonl", len(u.r.batches)+1)
	f, err := u.r.cfg.API.Upload(ctx, name, cur.spool)
	if err != nil {
		return fmt.Errorf("uploading the batch file: %w", err)
	}
	return u.r.create(ctx, f.ID, cur.rows, cur.n)
}

// create creates the batch of file and records it in the journal before
// anything else happens.
func (r *Runner) create(ctx context.Context, file string, rows Rows, n int64) error {
	if err := r.j.add(record{Pending: true, File: file, Rows: &rows, N: n}); err != nil {
		return err
	}
	got, err := r.cfg.API.Create(ctx, file)
	if err != nil {
		return fmt.Errorf("creating the batch of %d rows: %w", n, err)
	}
	b := &batch{idx: len(r.batches), id: got.ID, file: file, rows: rows, n: n, status: got.Status, counts: got.Counts}
	if err := r.j.add(record{Batch: b.id, File: file, Rows: &b.rows, N: n}); err != nil {
		return err
	}
	r.batches = append(r.batches, b)
	rows.Each(func(seq int64) bool {
		if s := r.at(seq); s != nil {
			s.batch = int32(b.idx)
		}
		return true
	})
	r.stats.Batches++
	r.stats.Submitted += n
	r.cfg.Logger.Info("batch created", "batch", b.id, "rows", n, "file", file)
	return nil
}
