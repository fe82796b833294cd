package resilience

import (
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"
)

// cooldown makes a 429's Retry-After a pause for every call, not just the
// row that got it: the quota is shared, and everyone hitting it again at
// once is what a storm is. The pause itself is held in the slots' queue, so
// the rows that wait for it keep their order and no new row is admitted
// meanwhile.
type cooldown struct {
	slots   *Slots
	max     time.Duration
	log     *slog.Logger
	c       *Counters
	onPause func(until time.Time)

	// A 429 for a call sent after the last pause had ended says that pause
	// was too short: the next lasts twice as long (up to maxStreakPause),
	// rather than the few milliseconds a server may keep asking for. A call
	// sent after it that succeeds ends the streak.
	mu     sync.Mutex
	streak time.Duration // the last pause of the streak (0: none)
	endsAt time.Time     // when the last pause ends
}

// maxStreakPause caps the doubling of repeated pauses (a longer
// Retry-After is still honoured, up to max).
const maxStreakPause = 10 * time.Second

// refused is a 429 that asked for d, for a call sent at sentAt: every call
// pauses for d, or for twice the last pause when that one did not help.
func (c *cooldown) refused(d time.Duration, sentAt time.Time) {
	c.mu.Lock()
	if c.streak > 0 && !sentAt.Before(c.endsAt) {
		d = max(d, min(2*c.streak, max(maxStreakPause, c.streak)))
	}
	if !sentAt.Before(c.endsAt) || c.streak == 0 {
		// A call sent during the pause, or before it, reports the excess
		// that pause answers already: it lengthens nothing.
		c.streak = min(d, c.max)
	}
	c.endsAt = maxTime(c.endsAt, time.Now().Add(min(d, c.max)))
	c.mu.Unlock()
	c.pause(d)
}

// ok is a success for a call sent at sentAt: sent after the last pause, it
// ends the streak.
func (c *cooldown) ok(sentAt time.Time) {
	c.mu.Lock()
	if c.streak > 0 && !sentAt.Before(c.endsAt) {
		c.streak = 0
	}
	c.mu.Unlock()
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// remaining is how long new calls must still wait.
func (c *cooldown) remaining() time.Duration { return c.slots.Paused() }

func (c *cooldown) pause(d time.Duration) {
	d = min(d, c.max)
	// A little jitter, never shortening the pause, so that several
	// processes sharing a quota do not all come back in the same instant.
	d += time.Duration(rand.Int64N(int64(min(d/10, 200*time.Millisecond)) + 1))
	until := time.Now().Add(d)
	if c.slots.Pause(d) {
		c.c.cooldowns.Add(1)
		c.log.Info("rate limited (HTTP 429): pausing all calls", "for", d.Round(time.Millisecond))
	}
	if c.onPause != nil {
		c.onPause(until)
	}
}
