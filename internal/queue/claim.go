package queue

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Claimed is a row a worker holds under a lease.
type Claimed struct {
	Seq       int64
	Attempt   int // claims so far, this one included: the fence
	RequestID string
	Text      string
	// Reserved: the row is reserved for this worker, not running. It
	// stays pending (it does not count against the caps) and the worker
	// starts it only in the place of a row of its own that finished (see
	// Completion.Promote) or once a claim promotes it; Attempt is the
	// attempt it will run as.
	Reserved bool
}

// Action says what a completion does to its row.
type Action string

const (
	// Finish records the result as final: the row is done.
	Finish Action = "done"
	// Retry records the result as the row's last failure and puts it back
	// to pending, due after a backoff.
	Retry Action = "retry"
	// GiveBack puts the row back to pending at once, as if never claimed
	// (when never sent): it was claimed but not started.
	GiveBack Action = "giveback"
)

// Completion is a worker's result for a row it claimed.
type Completion struct {
	Seq     int64
	Attempt int
	Action  Action
	Delay   time.Duration // Retry: when the row is due again

	Outcome   string
	Label     string
	Score     float64
	Model     string
	Attempts  int   // provider calls for the row in this claim
	LatencyMs int64 // first call to answer
	Error     string
	WaitMs    int64 // from the claim to the first call; -1: never sent
	TotalMs   int64 // from the claim to the result

	// Promote is a reservation of this worker's that it started in this
	// row's place when this row's call ended: the round trip makes it
	// running, fenced on this row still running under this worker with
	// its lease (so the swap takes exactly the room this row frees, in the
	// transaction that frees it).
	Promote *Claimed
}

// CycleIn is what one cycle writes and asks.
type CycleIn struct {
	Done []Completion
	Want int // rows to claim at most
	// Reserve asks for up to this many rows reserved, beside the claim
	// (batches that reserve: see Session.Reserves). Promote lists the
	// worker's reservations to run first, within the room Want claims.
	Reserve int
	Promote []int64
	// Release gives back reservations the worker will not start.
	Release []int64
	// PauseFor and OpenFor report this worker's own 429 pause and open
	// breaker, as durations from now (the database clock adds them).
	PauseFor, OpenFor time.Duration
	// Fallback: claim while a shared breaker is open (the worker's fallback
	// model answers); without it no row is claimed then.
	Fallback bool
	// AskRemaining asks whether the batch has rows pending or running.
	AskRemaining bool
	// Reconcile gives back the rows leased to this worker that it does not
	// hold (Held): claims committed in a round trip whose answer was lost.
	Reconcile bool
	Held      []int64
}

// CycleOut is what one cycle did and saw.
type CycleOut struct {
	Claimed []Claimed // running (Reserved false) or reserved
	// Promoted are the reservations the completions' Promote made
	// running.
	Promoted []int64
	// Written are the completions the fence let through; the others were
	// discarded (the row's lease had passed to another worker).
	Written   int
	Discarded []Completion
	// Paused and Open are how long the batch's shared pause and breaker
	// still hold (0: not).
	Paused, Open time.Duration
	Remaining    bool // set when asked
}

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
// of one client with no client cap and no rate (the claimOne batches). A
// reserved row is started the moment one of the worker's calls ends, in
// that call's place, so the provider's slot does not sit idle for the
// database round trip that writes the result and claims the next row. A
// client cap or a rate would need the swap to ask the batch first.
func (s *Session) Reserves() bool {
	return s.batch.ClientColumn == "" && s.batch.ClientCap == 0 && s.batch.GlobalRPS == 0
}

// enterBatch opens every transaction a worker runs on its batch ($1): it
// takes the batch's gate, a transaction-level advisory lock, shared. queue
// drop takes the gate exclusive before it deletes anything (see Drop), so a
// drop waits for the round trips and heartbeats under way, and those that
// start after it wait for the drop at this first statement, holding no lock
// yet: a worker's transaction, which locks its rows before the batch row,
// and the drop, which deletes the batch row and every row, never each hold
// what the other waits for (a deadlock). Workers share the gate: they never
// wait for each other on it. Past it, the batch row is there, or the batch
// was dropped.
const enterBatch = `select pg_advisory_xact_lock_shared(` + batchGate + `)`

// enterBatchAsync is enterBatch for a transaction whose commit need not
// wait for the disk (see Cycle).
const enterBatchAsync = `select set_config('synchronous_commit', 'off', true), pg_advisory_xact_lock_shared(` + batchGate + `)`

// batchGate is the advisory lock key of batch $1.
const batchGate = `hashtextextended('hfsent.batch', $1::bigint)`

// ErrBatchGone is a worker's round trip finding its batch deleted (queue
// drop): nothing it holds can be written.
var ErrBatchGone = errors.New("batch gone")

// lockBatch takes the batch row before anything of a cycle counts or reads
// the batch (only the fenced results come before it), so claims of one
// batch are serialised; every count below is made in later statements,
// whose snapshots are taken after the lock is held.
const lockBatch = `
select coalesce(extract(epoch from paused_until - clock_timestamp()) * 1000, 0),
       coalesce(extract(epoch from breaker_open_until - clock_timestamp()) * 1000, 0)
from hfsent.batch where id = $1 for update`

const reportBackpressure = `
with u as (
	update hfsent.batch set
		paused_until = case when $2::bigint > 0 then greatest(coalesce(paused_until, '-infinity'), clock_timestamp() + $2 * interval '1 millisecond') else paused_until end,
		breaker_open_until = case when $3::bigint > 0 then greatest(coalesce(breaker_open_until, '-infinity'), clock_timestamp() + $3 * interval '1 millisecond') else breaker_open_until end
	where id = $1
	returning id
)
select pg_notify($4, 'backpressure') from u`

// lostClaims counts, for a result of claim d.attempt of a row whose
// result so far is p (none: null), the claims before this one that wrote
// none: their worker stopped (killed, or stalled past its lease) after it
// had sent the row, as a worker sends a row once it claims it. Each counts
// as one provider call, the least it made (see result.claims).
const lostClaims = `greatest(0, d.attempt - 1 - coalesce(p.claims, 0))`

// complete writes results, fenced: a row is written only while it is still
// running under this owner and this attempt. A retry records the failure
// as the row's last and puts it back; a give-back undoes the claim.
const complete = `
with d as (
	select * from unnest($2::bigint[], $3::int[], $4::text[], $5::text[], $6::text[], $7::float8[], $8::text[],
	                     $9::int[], $10::bigint[], $11::text[], $12::bigint[], $13::bigint[], $14::bigint[])
	  as d(seq, attempt, action, outcome, label, score, model, attempts, latency_ms, error, wait_ms, total_ms, delay_ms)
),
upd as (
	update hfsent.item i set
		state = case d.action when 'done' then 'done' else 'pending' end,
		attempt = case when d.action = 'giveback' and d.attempts = 0 then i.attempt - 1 else i.attempt end,
		available_at = clock_timestamp() + d.delay_ms * interval '1 millisecond',
		lease_owner = null,
		lease_until = null
	from d
	where i.batch_id = $1 and i.seq = d.seq and i.state = 'running' and i.lease_owner = $15 and i.attempt = d.attempt
	returning i.seq, i.claimed_at
),
q as (
	select upd.seq, greatest(0, (extract(epoch from upd.claimed_at - b.started_at) * 1000)::bigint) as queued
	from upd, hfsent.batch b where b.id = $1
),
res as (
	insert into hfsent.result as r (batch_id, seq, outcome, label, score, model, attempts, claims, latency_ms, error,
	                                queued_ms, started_ms, finished_ms, finished_at, worker)
	select $1, d.seq, d.outcome, d.label, d.score, d.model,
	       coalesce(p.attempts, 0) + ` + lostClaims + ` + d.attempts, d.attempt, d.latency_ms, d.error,
	       q.queued, case when d.wait_ms >= 0 then q.queued + d.wait_ms end, q.queued + d.total_ms, clock_timestamp(), $15
	from d join q on q.seq = d.seq
	left join hfsent.result p on p.batch_id = $1 and p.seq = d.seq
	where d.action <> 'giveback'
	on conflict (batch_id, seq) do update set
		outcome = excluded.outcome, label = excluded.label, score = excluded.score, model = excluded.model,
		attempts = excluded.attempts, claims = excluded.claims, latency_ms = excluded.latency_ms, error = excluded.error,
		queued_ms = excluded.queued_ms, started_ms = excluded.started_ms, finished_ms = excluded.finished_ms,
		finished_at = excluded.finished_at, worker = excluded.worker
)
select seq from upd
union all
-- Rows this worker already finished: a round trip whose answer was lost
-- (the connection dropped at its commit) is sent again; those results are
-- in, not refused.
select d.seq from d
join hfsent.item i on i.batch_id = $1 and i.seq = d.seq and i.state = 'done'
join hfsent.result r on r.batch_id = $1 and r.seq = d.seq and r.worker = $15
where d.action = 'done' and d.seq not in (select seq from upd)`

// claimLease and claimedRows end both claim statements (claim and
// claimOne): every claim leases its pick the same way, so the fence
// (state, owner, attempt) sees one kind of claimed row. Both read the CTEs
// t (the clock after the lock) and pick.
const claimLease = `claimed as (
	update hfsent.item i set state = 'running', attempt = i.attempt + 1, lease_owner = $3,
		lease_until = t.now + $4 * interval '1 millisecond', claimed_at = t.now
	from pick, t
	where i.batch_id = $1 and i.seq = pick.seq
	returning i.seq, i.attempt
),`

const claimedRows = `
select c.seq, c.attempt, c.reserved, inp.request_id, inp.text
from (select seq, attempt, false as reserved from claimed
      union all select seq, attempt, true from reserved) c
join hfsent.input inp on inp.batch_id = $1 and inp.seq = c.seq
order by c.seq`

// claim is the second statement: in a snapshot taken after the batch row
// is locked, it counts the rows running under an unexpired lease (in all
// and per client), takes the room the global cap, the rate bucket and the
// request leave, ranks the first pending, due rows of each client (a
// LATERAL probe of the pending index per client: the cost does not grow
// with the backlog), gives the room first to the clients with the fewest
// rows running, within the per-client cap, and leases what it picked. The
// probe starts at the client's pending_from, which the claim then raises to
// the first row it saw pending and did not take, or past the last it took
// (in a one-client batch only once that moves it 64 rows or more, to spare a
// write of the client row per claim). Every
// time is clock_timestamp(), taken after the lock, never now(), the
// transaction's start. Between clients with as many rows running, the one
// served longest ago goes first, so that one-row claims take turns rather
// than drain the oldest client first.
const claim = `
with t as (select clock_timestamp() as now),
b as (
	select batch.global_cap, batch.client_cap, batch.global_rps, batch.started_at, batch.client_column,
	       (batch.paused_until > t.now) or (not $5::bool and batch.breaker_open_until > t.now) as held,
	       case when batch.global_rps is null then null
	            else least(greatest(batch.global_rps, 1), batch.tokens + batch.global_rps * extract(epoch from t.now - batch.tokens_at)) end as avail
	from hfsent.batch, t where batch.id = $1
),
run as (
	select i.client, count(*)::int as n
	from hfsent.item i, t
	where i.batch_id = $1 and i.state = 'running' and i.lease_until > t.now
	group by i.client
),
room as (
	select case when b.held is true then 0
	            else greatest(0, least($2::int, b.global_cap - coalesce((select sum(n) from run), 0)::int,
	                                   coalesce(floor(b.avail)::int, $2::int))) end as r
	from b
),
cand as (
	select p.seq, c.client, c.served_at, c.pending_from,
	       coalesce(run.n, 0) + row_number() over (partition by c.client order by p.seq) as rank
	from hfsent.client c
	left join run on run.client = c.client
	cross join t
	cross join lateral (
		select i.seq from hfsent.item i
		where i.batch_id = $1 and i.client = c.client and i.state = 'pending' and i.available_at <= t.now
		  and i.seq >= c.pending_from
		order by i.seq
		limit (select r from room)
		for update skip locked
	) p
	where c.batch_id = $1 and (select r from room) > 0
),
pick as (
	select cand.seq, cand.client, cand.pending_from from cand, b
	where b.client_cap is null or cand.rank <= b.client_cap
	order by cand.rank, cand.served_at nulls first, cand.seq
	limit (select r from room)
),
mark as (
	select m.client, m.pending_from,
	       coalesce((select i.seq from hfsent.item i
	                 where i.batch_id = $1 and i.client = m.client and i.state = 'pending' and i.seq >= m.pending_from
	                   and i.seq not in (select seq from pick)
	                 order by i.seq limit 1),
	                m.last + 1) as next
	from (select client, min(pending_from) as pending_from, max(seq) as last from pick group by client) m
),
served as (
	update hfsent.client c set
		served_at = case when b.client_column is not null then t.now else c.served_at end,
		pending_from = mark.next
	from t, b, mark
	where c.batch_id = $1 and c.client = mark.client
	  and (b.client_column is not null or mark.next >= mark.pending_from + 64)
),
` + claimLease + `
bucket as (
	update hfsent.batch set
		tokens = case when b.global_rps is null then batch.tokens else b.avail - (select count(*) from claimed) end,
		tokens_at = case when b.global_rps is null then batch.tokens_at else t.now end,
		started_at = coalesce(batch.started_at, t.now)
	from b, t
	where batch.id = $1 and exists (select 1 from claimed) and (b.global_rps is not null or b.started_at is null)
),
reserved as (select 0::bigint as seq, 0 as attempt where false)` + claimedRows

// claimOne is claim for a batch of one client with no client cap and no
// rate: the same counts, times and locks (the second statement, its
// snapshot taken after the batch row is locked; clock_timestamp(), never
// now()), but no ranking of clients, so a smaller plan, which costs less to
// start on every round trip and holds the batch row for less time (about a
// sixth less server CPU per row in bench/queue_vs_classify.sh). The probe
// stays LATERAL: joined plainly, the generic plan scanned every pending row
// and sorted them.
//
// These batches also reserve ($6 rows at most, see Session.Reserves): the
// rows the probe finds past those it claims are leased to the worker but
// stay pending, so they count against no cap; while the batch is held
// (paused, breaker open) nothing is claimed or reserved. The room goes
// first to the worker's own reservations ($7), so a worker never waits on
// rows it holds. Other workers' reservations are passed over until their
// lease ends. pending_from never passes a reserved row (the mark is the
// first pending row not claimed), so a reservation given back or expired
// is found again without lowering it.
const claimOne = `
with t as (select clock_timestamp() as now),
h as (
	select batch.started_at,
	       (batch.paused_until > t.now) or (not $5::bool and batch.breaker_open_until > t.now) as held,
	       batch.global_cap - (select count(*) from hfsent.item i
	                           where i.batch_id = $1 and i.state = 'running' and i.lease_until > t.now)::int as room
	from hfsent.batch, t where batch.id = $1
),
b as (
	select started_at,
	       case when held then 0 else greatest(0, least($2::int, room)) end as r,
	       case when held then 0 else greatest(0, $6::int) end as k
	from h
),
c as (select client.client, client.pending_from from hfsent.client where client.batch_id = $1),
own as (
	select i.seq from hfsent.item i
	where i.batch_id = $1 and i.seq = any($7::bigint[]) and ` + reservedBy3 + `
	order by i.seq
	limit (select r from b)
	for update skip locked
),
probe as (
	select p.seq, row_number() over (order by p.seq) + (select count(*) from own) as n
	from c cross join t cross join lateral (
		select i.seq from hfsent.item i
		where i.batch_id = $1 and i.client = c.client and i.state = 'pending' and i.available_at <= t.now
		  and i.seq >= c.pending_from
		  and (i.lease_owner is null or (i.lease_until <= t.now and i.lease_owner <> $3))
		order by i.seq
		limit (select r + k from b)
		for update skip locked
	) p
),
pick as (
	select seq from own
	union all
	select seq from probe where n <= (select r from b)
),
res as (select seq from probe where n > (select r from b) and n <= (select r + k from b)),
mark as (
	select c.client, c.pending_from,
	       coalesce((select i.seq from hfsent.item i
	                 where i.batch_id = $1 and i.client = c.client and i.state = 'pending' and i.seq >= c.pending_from
	                   and i.seq not in (select seq from pick)
	                 order by i.seq limit 1),
	                (select max(seq) + 1 from pick)) as next
	from c where exists (select 1 from pick)
),
served as (
	update hfsent.client set pending_from = mark.next
	from mark
	where client.batch_id = $1 and client.client = mark.client and mark.next >= mark.pending_from + 64
),
` + claimLease + `
reserved as (
	update hfsent.item i set lease_owner = $3, lease_until = t.now + $4 * interval '1 millisecond'
	from res, t
	where i.batch_id = $1 and i.seq = res.seq
	returning i.seq, i.attempt + 1 as attempt
),
bucket as (
	update hfsent.batch set started_at = t.now
	from b, t
	where batch.id = $1 and b.started_at is null and exists (select 1 from claimed)
)` + claimedRows

// promote makes running the reservations workers started in the place of
// rows of theirs that finished: each only while that row is still running
// under this worker and its attempt, with its lease unexpired (so it is
// counted in the room; locked, so a rescue passes over it), and the
// reservation still this worker's. The results, in a later statement of
// the same transaction, free those rows: the swap commits at once. Its
// owner and lease are $3 and $4, as in the claims.
const promote = `
with p as (
	select * from unnest($2::bigint[], $5::int[], $6::bigint[], $7::int[]) as p(x, xa, y, ya)
),
t as (select clock_timestamp() as now),
x as (
	select i.seq, i.attempt from hfsent.item i, t
	where i.batch_id = $1 and i.seq = any($2::bigint[]) and i.state = 'running' and i.lease_owner = $3
	  and i.lease_until > t.now
	for update of i
)
update hfsent.item i set state = 'running', attempt = i.attempt + 1,
	lease_until = t.now + $4 * interval '1 millisecond', claimed_at = t.now
from p, t, x
where x.seq = p.x and x.attempt = p.xa
  and i.batch_id = $1 and i.seq = any($6::bigint[]) and i.seq = p.y and ` + reservedBy3 + ` and i.attempt + 1 = p.ya
returning i.seq`

// reservedBy3 is "row i is a reservation of $3's" ($3: the lease owner in
// every statement that uses it): pending and leased. It says "not running"
// rather than "pending" (a row done has no lease owner) because "pending"
// leads the planner, while the table has no statistics yet (right after a
// push), to walk the whole pending index instead of looking the rows up by
// their keys.
const reservedBy3 = `i.state <> 'running' and i.lease_owner = $3`

// release gives back reservations: pending rows leased to this worker.
const release = `
update hfsent.item i set lease_owner = null, lease_until = null
where i.batch_id = $1 and i.seq = any($2::bigint[]) and ` + reservedBy3

// lowerMarks runs, holding the batch row, in every transaction that makes
// rows pending again ($2: their seqs, its own writes; rows that are not
// pending are passed over): a claim that raised pending_from past them
// without seeing them (they were not pending yet in its snapshot) has
// committed by then, and the next one sees them.
const lowerMarks = `
update hfsent.client c set pending_from = m.seq
from (select i.client, min(i.seq) as seq from hfsent.item i
      where i.batch_id = $1 and i.seq = any($2::bigint[]) and i.state = 'pending'
      group by i.client) m
where c.batch_id = $1 and c.client = m.client and m.seq < c.pending_from`

// reconcile gives back the rows leased to $2 that it does not hold ($3),
// lowering their clients' pending_from (it runs holding the batch row),
// and its reservations it does not hold (pending_from never passed them).
// Those are found by a walk of the batch's pending rows: this runs only
// after a round trip failed.
const reconcile = `
with g as (
	update hfsent.item set state = 'pending', attempt = attempt - 1, lease_owner = null, lease_until = null
	where batch_id = $1 and state = 'running' and lease_owner = $2 and seq <> all($3::bigint[])
	returning client, seq
),
rel as (
	update hfsent.item set lease_owner = null, lease_until = null
	where batch_id = $1 and state = 'pending' and lease_owner = $2 and seq <> all($3::bigint[])
)
update hfsent.client c set pending_from = m.seq
from (select client, min(seq) as seq from g group by client) m
where c.batch_id = $1 and c.client = m.client and m.seq < c.pending_from`

// remaining says whether rows are still pending or running, and marks the
// batch finished when none are, waking the workers waiting for a poll, so
// that --exit-when-done ends them all at once, not a poll later.
const remaining = `
with r as (
	select exists (select 1 from hfsent.item where batch_id = $1 and state = 'pending')
	    or exists (select 1 from hfsent.item where batch_id = $1 and state = 'running') as anyleft
),
f as (
	update hfsent.batch set finished_at = clock_timestamp()
	where id = $1 and finished_at is null and not (select anyleft from r)
	returning id
),
n as (select pg_notify($2, 'done') from f)
select anyleft from r, (select count(*) from n) nn`

// Cycle runs one round trip (a pipeline of statements in one transaction):
// write this worker's results; lock the batch row; report this worker's
// backpressure; claim up to in.Want rows (in another statement, whose
// snapshot sees every result committed before the lock was granted, and
// this transaction's own); and, if asked, see whether anything remains.
func (s *Session) Cycle(ctx context.Context, in CycleIn) (CycleOut, error) {
	var out CycleOut
	batch := &pgx.Batch{}
	// One transaction, not one for the results and one for the claim: each
	// costs the server as much as a statement, and every statement of a
	// round trip is CPU the 20 ms calls wait behind.
	//
	// Its commit need not wait for the disk. A claim lost in a crash of the
	// database leaves its row pending, and the worker that thought it held
	// it has its result refused by the fence, so the row is redone. A result
	// lost in one leaves its row running under this worker's lease, which
	// the worker no longer renews (the row is no longer held), or gives back
	// at once (the round trips that failed make the next one reconcile):
	// the row is redone, never lost.
	batch.Queue("begin")
	batch.Queue(enterBatchAsync, s.batch.ID)
	if len(in.Release) > 0 {
		batch.Queue(release, s.batch.ID, in.Release, s.owner)
	}
	// Swaps before the results that make them: the row a reservation took
	// the place of must still be running.
	var px, py []int64
	var pxa, pya []int32
	for _, c := range in.Done {
		if c.Promote != nil {
			px, pxa = append(px, c.Seq), append(pxa, int32(c.Attempt))
			py, pya = append(py, c.Promote.Seq), append(pya, int32(c.Promote.Attempt))
		}
	}
	if len(px) > 0 {
		batch.Queue(promote, s.batch.ID, px, s.owner, s.lease.Milliseconds(), pxa, py, pya)
	}
	// The results first, before the batch row is locked: they hold only
	// their own rows, fenced one by one, and a row written frees its place
	// for the claim below.
	if len(in.Done) > 0 {
		batch.Queue(complete, completionArgs(s.batch.ID, s.owner, in.Done)...)
	}
	batch.Queue(lockBatch, s.batch.ID)
	var back []int64 // rows the results put back to pending
	for _, c := range in.Done {
		if c.Action != Finish {
			back = append(back, c.Seq)
		}
	}
	if len(back) > 0 {
		batch.Queue(lowerMarks, s.batch.ID, back)
	}
	if in.Reconcile {
		batch.Queue(reconcile, s.batch.ID, s.owner, in.Held)
	}
	if in.PauseFor > 0 || in.OpenFor > 0 {
		batch.Queue(reportBackpressure, s.batch.ID, ceilMs(in.PauseFor), ceilMs(in.OpenFor), channel(s.batch.ID))
	}
	asked := in.Want > 0 || (in.Reserve > 0 && s.Reserves())
	if asked {
		if s.Reserves() {
			batch.Queue(claimOne, s.batch.ID, in.Want, s.owner, s.lease.Milliseconds(), in.Fallback, in.Reserve, in.Promote)
		} else {
			batch.Queue(claim, s.batch.ID, in.Want, s.owner, s.lease.Milliseconds(), in.Fallback)
		}
	}
	if in.AskRemaining {
		batch.Queue(remaining, s.batch.ID, channel(s.batch.ID))
	}
	batch.Queue("commit")
	br := s.db.Pool.SendBatch(ctx, batch)
	defer br.Close()

	for range 2 {
		if _, err := br.Exec(); err != nil {
			return out, err
		}
	}
	if len(in.Release) > 0 {
		if _, err := br.Exec(); err != nil {
			return out, err
		}
	}
	if len(px) > 0 {
		rows, err := br.Query()
		if err != nil {
			return out, err
		}
		if out.Promoted, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return out, err
		}
	}
	if len(in.Done) > 0 {
		rows, err := br.Query()
		if err != nil {
			return out, err
		}
		seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return out, err
		}
		written := make(map[int64]bool, len(seqs))
		for _, seq := range seqs {
			written[seq] = true
		}
		out.Written = len(written)
		for _, c := range in.Done {
			if !written[c.Seq] {
				out.Discarded = append(out.Discarded, c)
			}
		}
	}
	var pausedMs, openMs float64
	if err := br.QueryRow().Scan(&pausedMs, &openMs); errors.Is(err, pgx.ErrNoRows) {
		// Past the gate, the batch row is there or the batch was dropped.
		return out, ErrBatchGone
	} else if err != nil {
		return out, err
	}
	out.Paused, out.Open = msDuration(pausedMs), msDuration(openMs)
	if len(back) > 0 {
		if _, err := br.Exec(); err != nil {
			return out, err
		}
	}
	if in.Reconcile {
		if _, err := br.Exec(); err != nil {
			return out, err
		}
	}
	if in.PauseFor > 0 || in.OpenFor > 0 {
		if _, err := br.Exec(); err != nil {
			return out, err
		}
	}
	if asked {
		rows, err := br.Query()
		if err != nil {
			return out, err
		}
		out.Claimed, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed, error) {
			var c Claimed
			err := r.Scan(&c.Seq, &c.Attempt, &c.Reserved, &c.RequestID, &c.Text)
			return c, err
		})
		if err != nil {
			return out, err
		}
	}
	if in.AskRemaining {
		if err := br.QueryRow().Scan(&out.Remaining); err != nil {
			return out, err
		}
	}
	if _, err := br.Exec(); err != nil {
		return out, err
	}
	if err := br.Close(); err != nil {
		return out, err
	}
	return out, nil
}

// ceilMs is d in whole milliseconds, rounded up (0 stays 0).
func ceilMs(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func msDuration(ms float64) time.Duration {
	if ms <= 0 || math.IsNaN(ms) {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func completionArgs(batchID int64, owner string, done []Completion) []any {
	n := len(done)
	seq, delay := make([]int64, n), make([]int64, n)
	attempt, attempts := make([]int32, n), make([]int32, n)
	action, oc, label, model, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	score := make([]float64, n)
	lat, wait, total := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, c := range done {
		seq[i], attempt[i], action[i], oc[i], label[i] = c.Seq, int32(c.Attempt), string(c.Action), c.Outcome, c.Label
		score[i], model[i], attempts[i], lat[i], errs[i] = c.Score, c.Model, int32(c.Attempts), c.LatencyMs, c.Error
		wait[i], total[i], delay[i] = c.WaitMs, max(0, c.TotalMs), max(0, c.Delay.Milliseconds())
	}
	return []any{batchID, seq, attempt, action, oc, label, score, model, attempts, lat, errs, wait, total, delay, owner}
}

// Heartbeat renews the leases of the rows this worker holds, running or
// reserved (held: a claim whose answer was lost is not renewed, so it
// expires and is redone),
// records that the worker is alive,
// and rescues rows whose lease expired under any worker: back to pending
// after a backoff, or, once their attempts are used up, done with their
// last failure (or upstream_failed when they never got one).
func (s *Session) Heartbeat(ctx context.Context, host string, pid int, held []int64) (renewed, rescued, exhausted int64, err error) {
	b := &pgx.Batch{}
	// The renewal first, so that this worker's own rows are renewed, not
	// rescued; in a transaction of its own, so that the rescue, which holds
	// the batch row as everything that makes rows pending does (see
	// lowerMarks), takes no row lock before it. Both pass the batch's gate
	// first (enterBatch), as every worker transaction does.
	b.Queue("begin")
	b.Queue(enterBatch, s.batch.ID)
	b.Queue(`update hfsent.item set lease_until = clock_timestamp() + $3 * interval '1 millisecond'
		where batch_id = $1 and seq = any($4::bigint[]) and state in ('running', 'pending') and lease_owner = $2`, s.batch.ID, s.owner, s.lease.Milliseconds(), held)
	b.Queue("commit")
	b.Queue("begin")
	b.Queue(enterBatch, s.batch.ID)
	b.Queue(lockBatch, s.batch.ID)
	b.Queue(rescue, s.batch.ID, channel(s.batch.ID))
	b.Queue(`insert into hfsent.worker (batch_id, id, host, pid) select $1, $2, $3, $4 from hfsent.batch where id = $1
		on conflict (batch_id, id) do update set seen_at = clock_timestamp()`, s.batch.ID, s.owner, host, pid)
	b.Queue("commit")
	br := s.db.Pool.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return 0, 0, 0, err
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return 0, 0, 0, err
	}
	renewed = tag.RowsAffected()
	for range 3 {
		if _, err := br.Exec(); err != nil {
			return renewed, 0, 0, err
		}
	}
	if tag, err = br.Exec(); err != nil {
		return renewed, 0, 0, err
	}
	gone := tag.RowsAffected() == 0 // the batch row, past the gate
	if err := br.QueryRow().Scan(&rescued, &exhausted); err != nil {
		return renewed, 0, 0, err
	}
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return renewed, rescued, exhausted, err
		}
	}
	if err := br.Close(); err != nil {
		return renewed, rescued, exhausted, err
	}
	if gone {
		return renewed, rescued, exhausted, ErrBatchGone
	}
	return renewed, rescued, exhausted, nil
}

const rescue = `
with t as (select clock_timestamp() as now),
-- Rows locked are being written by their worker right now: passed over,
-- so the rescue, holding the batch row, never waits for a round trip that
-- waits for it.
e as (
	select i.seq from hfsent.item i, t
	where i.batch_id = $1 and i.state = 'running' and i.lease_until < t.now
	for update of i skip locked
),
x as (
	update hfsent.item i set
		state = case when i.attempt >= b.max_attempts then 'done' else 'pending' end,
		available_at = t.now + least(60000, 1000 * power(2, greatest(i.attempt, 1) - 1)) * (0.5 + random() / 2) * interval '1 millisecond',
		lease_owner = null,
		lease_until = null
	from t, hfsent.batch b, e
	where b.id = $1 and i.batch_id = $1 and i.seq = e.seq and i.state = 'running' and i.lease_until < t.now
	returning i.seq, i.client, i.state, i.attempt, i.claimed_at, b.started_at
),
l as (
	update hfsent.client c set pending_from = m.seq
	from (select client, min(seq) as seq from x where state = 'pending' group by client) m
	where c.batch_id = $1 and c.client = m.client and m.seq < c.pending_from
),
-- A row done with its last failure keeps it; its attempts gain the claims
-- lost since (this one included), one provider call each.
r as (
	insert into hfsent.result as r (batch_id, seq, outcome, error, attempts, claims, queued_ms, started_ms, finished_ms, worker)
	select $1, x.seq, 'upstream_failed',
	       'no result: the worker holding it stopped (crashed or stalled past its lease) on each of ' || x.attempt || ' attempts',
	       coalesce(p.attempts, 0) + greatest(0, x.attempt - coalesce(p.claims, 0)), x.attempt,
	       greatest(0, (extract(epoch from x.claimed_at - x.started_at) * 1000)::bigint), null,
	       greatest(0, (extract(epoch from t.now - x.started_at) * 1000)::bigint), ''
	from x cross join t
	left join hfsent.result p on p.batch_id = $1 and p.seq = x.seq
	where x.state = 'done'
	on conflict (batch_id, seq) do update set attempts = excluded.attempts, claims = excluded.claims
),
n as (select pg_notify($2, 'rescue') from x limit 1)
select count(*) filter (where state = 'pending'), count(*) filter (where state = 'done') from x, (select count(*) from n) nn`

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
