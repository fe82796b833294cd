package queue

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Session is a worker's identity in a batch: the lease owner its claims
// carry.
type Session struct {
	db    *DB
	batch *Batch
	owner string
	lease time.Duration
}

// NewSession starts a worker's session in batch b with the lease given.
func (db *DB) NewSession(b *Batch, owner string, lease time.Duration) *Session {
	if lease <= 0 {
		lease = b.Lease
	}
	return &Session{db: db, batch: b, owner: owner, lease: lease}
}

// Lease is the lease length of this session's claims.
func (s *Session) Lease() time.Duration { return s.lease }

// Reserves reports whether the batch lets a worker reserve rows: a batch
// of one client with no client cap and no rate (the claim_one batches). A
// reserved row is started the moment one of the worker's calls ends, in
// that call's place, so the provider's slot does not sit idle for the
// database round trip that writes the result and claims the next row. A
// client cap or a rate would need the swap to ask the batch first.
func (s *Session) Reserves() bool {
	return s.batch.ClientColumn == "" && s.batch.ClientCap == 0 && s.batch.GlobalRPS == 0
}

// ErrBatchGone is a worker's round trip finding its batch deleted (queue
// drop): nothing it holds can be written.
var ErrBatchGone = errors.New("batch gone")

// listen LISTENs on the batch's channel, on a connection of its own, and
// calls notified once it listens (what came before is not missed: the loop
// looks again) and on each notification, until the connection fails or ctx
// ends.
func (s *Session) listen(ctx context.Context, notified func()) error {
	conn, err := s.db.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The connection is LISTENing: it is not handed back to the pool.
	c := conn.Hijack()
	defer c.Close(context.WithoutCancel(ctx))
	// LISTEN takes its channel as a name, not a parameter.
	if _, err := c.Exec(ctx, "listen "+pgx.Identifier{channel(s.batch.ID)}.Sanitize()); err != nil {
		return err
	}
	notified()
	for {
		if _, err := c.WaitForNotification(ctx); err != nil {
			return err
		}
		notified()
	}
}
