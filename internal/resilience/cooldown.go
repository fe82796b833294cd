package resilience

import (
	"log/slog"
	"math/rand/v2"
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
