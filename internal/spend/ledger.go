package spend

import (
	"math"
	"sync"

	"github.com/hfsent/hfsent/internal/provider"
)

// Ledger is what one process spent: every call charged the usage its
// provider reported, priced by Prices (or the cost the server itself
// reported, which wins). With a limit (--max-spend), every call is
// reserved at its estimate before it is sent and corrected by its usage
// when it is back; a reservation that would take the spend past the limit
// is refused, and from then on every one is: sending has stopped. A
// fleet's budget adds what its other members spent (SetFleet).
//
// It is safe for concurrent use.
type Ledger struct {
	prices Prices
	limit  float64 // USD; 0: none

	mu       sync.Mutex
	spent    float64 // the cost of the calls charged
	reserved float64 // the estimates of the calls in flight
	inFlight int
	calls    int64 // calls charged a known cost
	unpriced int64 // calls whose cost is unknown: no usage, or no price for the model
	stopped  bool
	// fleet: a budget's limit on the spend of all its members since it was
	// set (0: none), and what the others spent, as its database last said.
	fleetLimit, fleetOthers float64
	onLimit                 []func()
}

// NewLedger is a ledger pricing by prices, with a limit in USD (0: none).
func NewLedger(prices Prices, limit float64) *Ledger {
	return &Ledger{prices: prices, limit: limit}
}

// Prices is what the ledger prices by.
func (l *Ledger) Prices() Prices { return l.prices }

// Cost is what one call's usage u costs for model: the cost the server
// reported, else the usage at the model's price. ok is false when neither
// is known (no usage, or no price for the model): never guessed.
func (l *Ledger) Cost(model string, u provider.Usage, batch bool) (usd float64, ok bool) {
	if u.Costed {
		return u.Cost, true
	}
	p, ok := l.prices.For(model)
	if !ok {
		return 0, false
	}
	return p.Cost(u, batch, l.prices.BatchDiscount)
}

// Charge adds one call that was not reserved (a Batch API's result) to
// the spend, and says what it cost.
func (l *Ledger) Charge(model string, u provider.Usage, batch bool) (usd float64, ok bool) {
	usd, ok = l.Cost(model, u, batch)
	l.mu.Lock()
	l.count(usd, ok)
	l.mu.Unlock()
	return usd, ok
}

func (l *Ledger) count(usd float64, ok bool) {
	if ok {
		l.spent += usd
		l.calls++
	} else {
		l.unpriced++
	}
}

// Reservation is a call's estimate held against the limit while it is in
// flight.
type Reservation struct {
	l    *Ledger
	est  float64
	done bool
}

// Reserve holds est (USD) against the limit for a call about to be sent.
// It is refused (nil, false) when the spend, the estimates of the calls in
// flight and est would pass the limit, and from then on every reservation
// is: the callbacks of OnLimit are called once, before Reserve returns.
// Without a limit every reservation is granted.
func (l *Ledger) Reserve(est float64) (*Reservation, bool) {
	if est < 0 || math.IsNaN(est) {
		est = 0
	}
	l.mu.Lock()
	if l.stopped || l.passes(est) {
		first := !l.stopped
		l.stopped = true
		var hooks []func()
		if first {
			hooks = l.onLimit
		}
		l.mu.Unlock()
		for _, f := range hooks {
			f()
		}
		return nil, false
	}
	l.reserved += est
	l.inFlight++
	l.mu.Unlock()
	return &Reservation{l: l, est: est}, true
}

// Limited reports whether a limit holds the calls: theirs must be
// estimated before they are sent.
func (l *Ledger) Limited() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit > 0 || l.fleetLimit > 0
}

// passes reports whether a reservation of est would take the spend past
// a limit. mu is held.
func (l *Ledger) passes(est float64) bool {
	mine := l.spent + l.reserved + est
	if l.limit > 0 && mine > l.limit {
		return true
	}
	return l.fleetLimit > 0 && mine+l.fleetOthers > l.fleetLimit
}

// Settle charges the call's usage u (for model) in place of its estimate,
// and says what it cost. A reservation is settled once; later calls only
// price.
func (r *Reservation) Settle(model string, u provider.Usage) (usd float64, ok bool) {
	usd, ok = r.l.Cost(model, u, false)
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if r.done {
		return usd, ok
	}
	r.done = true
	r.l.reserved -= r.est
	r.l.inFlight--
	r.l.count(usd, ok)
	return usd, ok
}

// Cancel gives the estimate back: the call was not sent.
func (r *Reservation) Cancel() {
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	if !r.done {
		r.done = true
		r.l.reserved -= r.est
		r.l.inFlight--
	}
}

// OnLimit sets f to be called, once, when a reservation is first refused
// (the run's sending stops there). Set it before the first call.
func (l *Ledger) OnLimit(f func()) {
	l.mu.Lock()
	l.onLimit = append(l.onLimit, f)
	l.mu.Unlock()
}

// SetFleet is a fleet budget's word: its limit on the spend of all its
// members (0: none), and what the others have spent since it was set.
func (l *Ledger) SetFleet(limit, others float64) {
	l.mu.Lock()
	l.fleetLimit, l.fleetOthers = limit, max(0, others)
	l.mu.Unlock()
}

// Totals is what a ledger has counted.
type Totals struct {
	Spent    float64 // USD, the calls priced
	Reserved float64 // USD, the estimates of the calls in flight
	InFlight int
	Calls    int64 // calls priced
	Unpriced int64 // calls whose cost is unknown
	Limit    float64
	// FleetLimit and FleetOthers: a budget's limit, and what its other
	// members spent, as last heard.
	FleetLimit, FleetOthers float64
	// Stopped: a reservation was refused, nothing more is sent.
	Stopped bool
	// Priced: the ledger knows some price, or a server reported a cost:
	// Spent is a figure, not a blank.
	Priced bool
}

// Totals returns what the ledger has counted so far.
func (l *Ledger) Totals() Totals {
	if l == nil {
		return Totals{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return Totals{Spent: l.spent, Reserved: l.reserved, InFlight: l.inFlight, Calls: l.calls, Unpriced: l.unpriced,
		Limit: l.limit, FleetLimit: l.fleetLimit, FleetOthers: l.fleetOthers, Stopped: l.stopped,
		Priced: l.prices.Known() || l.calls > 0}
}
