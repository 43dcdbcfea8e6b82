package twopc

import "time"

// WithClock replaces the clock by which an owner judges the age of its own
// claim, so that tests can make time pass for one process only.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		c.now = now
		return nil
	}
}
