package budget

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A member's session lock (docs/guides/budget.md, "A member that is
// gone"). The member holds a session-level advisory lock on a connection
// of its own: when its process exits, PostgreSQL ends the session and
// frees the lock, and the next renewal of anyone sees it free (lost.sql),
// so the budget hands its share on once its calls must have ended, without
// keeping its safe share for --budget-safe-for. A stopped or cut-off
// member's session stays open (keepalives set past its safe window), so
// its safe share is kept.
//
// The one case the member itself must see: its session ended while the
// server is up (a proxy or a middlebox closed it) and it cannot renew. The
// budget then reclaims it as a process gone, so it must not send on its
// safe share: it drops it as soon as it reads the end of its connection.
// A session ended by the server going away (shutdown, crash recovery:
// SQLSTATE 57P01-57P03) is no such loss: the server that comes back sees
// that the member renewed before it began, and keeps its safe share.

// SessionLock takes the member's lock on conn, a connection the member
// keeps for it, with keepalives of at least keepalive: false when another
// session holds it.
func (s *Store) SessionLock(ctx context.Context, conn *pgx.Conn, budget, member string, keepalive time.Duration) (bool, error) {
	var ok bool
	var a, b, c, d string
	secs := int64(math.Ceil(keepalive.Seconds()))
	err := conn.QueryRow(ctx, sqlSessionLock, pgx.StrictNamedArgs{"budget": budget, "member": member, "keepalive_s": secs}).
		Scan(&ok, &a, &b, &c, &d)
	return ok, err
}

// serverGoingAway reports whether err is the server ending the session as
// it shuts down or restarts (admin shutdown, crash shutdown, cannot
// connect now).
func serverGoingAway(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Code {
	case "57P01", "57P02", "57P03":
		return true
	}
	return false
}

// keepalive is how long the member's lock session must outlast a silent
// cut: its lease, its safe window, its timeout and the grace, with margin.
func (m *Member) keepalive() time.Duration {
	return 2 * (m.cfg.Lease + m.cfg.SafeFor + m.cfg.Timeout + ReclaimGrace)
}

// hold keeps the member's session lock until Close, taking it again on a
// new connection after one ends.
func (m *Member) hold() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-m.stop; cancel() }()
	for ctx.Err() == nil {
		err := m.holdOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		m.log.Debug("budget session lock: taking it again", "err", summary(err))
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.cfg.Every):
		}
	}
}

// holdOnce takes the lock on a connection of its own and waits for that
// connection to end; an end that is not the server going away is a loss.
func (m *Member) holdOnce(ctx context.Context) error {
	conn, err := m.store.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	c := conn.Hijack() // the lock's connection is never handed back
	defer c.Close(context.WithoutCancel(ctx))
	ok, err := m.store.SessionLock(ctx, c, m.cfg.Budget, m.id, m.keepalive())
	if err != nil || !ok {
		return err // not held (a session of this member not yet ended): tried again
	}
	_, err = c.WaitForNotification(ctx) // returns when the connection ends
	if ctx.Err() == nil && !serverGoingAway(err) {
		m.lockLost()
	}
	return err
}

// lockLost drops the safe share if the last renewal saw the lock held:
// the budget will not keep it for this member any more.
func (m *Member) lockLost() {
	m.lockMu.Lock()
	defer m.lockMu.Unlock()
	now := time.Now()
	m.lostAt = int64(now.Sub(m.base))
	if m.lastLocked && m.safe.Load() > 0 {
		m.safe.Store(0)
		m.g.SetSafe(0, now)
		m.log.Warn("the budget's session lock was lost (connection closed, server up?): no safe share until it renews; the budget hands its share on as a member gone")
	}
}

// applySafe applies a renewal's safe share (asked: when the member asked
// for it), unless the lock was lost since it asked while the renewal saw
// it held.
func (m *Member) applySafe(r Renewal, asked, until time.Time) {
	m.lockMu.Lock()
	defer m.lockMu.Unlock()
	n := r.Safe
	m.lastLocked = r.Locked
	if r.Locked && m.lostAt >= int64(asked.Sub(m.base)) {
		n = 0
	}
	m.g.SetSafe(n, until)
	m.safe.Store(int64(n))
	m.safeEnd.Store(int64(until.Sub(m.base)))
}
