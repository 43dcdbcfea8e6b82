// Package clockskew measures, through a sharded cluster's router, how far
// the clock of each shard that holds the log is from the router's, and
// judges it against the horizons the statements rest on: the rule (this
// file), the hash and the chunks that place a probe document on a shard
// (chunks.go), and the probe itself (probe.go). A Coordinator's check
// (the root package's clockskew.go) and twopc doctor share it, so that
// they never disagree.
//
// Why it matters (PROTOCOL.md, Clocks): on a sharded cluster a commit's
// committedAt is the clock of the primary of the shard that holds the
// transaction ($currentDate), while the horizons below are judged by the
// router's clock (hello's localTime). A shard whose clock is behind the
// router's by about a horizon makes that horizon too short.
package clockskew

import (
	"fmt"
	"time"
)

// The horizons, by the router's clock, within which a commit stamped by a
// shard's clock is taken to be visible. The library's statementHorizon
// (statement.go) and checkpointHorizon (checkpoint.go) are these.
const (
	// PageHorizon is the page tokens' horizon: a statement's page that
	// ends within it of the router's clock hands out a token that resumes
	// from it (with the ids of the entries shown past it), so that the
	// next page lists an entry stamped after it that became visible late.
	// It holds while every shard that holds the log keeps its clock well
	// within it of the router's: a shard d behind leaves a commit d less
	// of it to become visible in. A second: well above both a commit's way
	// from its stamp to visibility (its write, replication to a majority,
	// the reply: milliseconds, hundreds under load) and any skew NTP
	// leaves (milliseconds), and short enough that the entries a token
	// carries past it (the last second's) stay few.
	PageHorizon = time.Second
	// CheckpointHorizon is the checkpoints' and the removal checkpoints'
	// horizon: a read records an account's balance only through entries
	// at least this old, and a Recoverer removes (WithHistory, no archive)
	// only transactions committed at least this long ago. A checkpoint is
	// saved for good, so a minute keeps it far from a commit's way to
	// visibility and from any skew that passes Bound, at the cost of
	// summing the last minute's entries past it.
	CheckpointHorizon = time.Minute
)

// Bound returns the largest skew allowed between the clock of a shard
// that holds the log and the router's: a quarter of the shortest of the
// horizons (250 ms for PageHorizon and CheckpointHorizon). The other
// three quarters are left to what a horizon is for: a commit's way from
// its stamp to being visible (its write, replication to a majority, the
// reply), which under load takes hundreds of milliseconds. No horizons,
// or one not positive, gives 0.
func Bound(horizons ...time.Duration) time.Duration {
	var shortest time.Duration
	for i, h := range horizons {
		if i == 0 || h < shortest {
			shortest = h
		}
	}
	if shortest <= 0 {
		return 0
	}
	return shortest / 4
}

// Reading is one shard's clock against the router's: the shard's clock
// minus the router's lies within [Low, High]. Positive is ahead of the
// router, negative behind it.
type Reading struct {
	Shard     string
	Low, High time.Duration
	// ID is the _id of the probe document whose $currentDate gave the
	// reading (one that hashes into the shard's chunks; see probe.go).
	ID int64
}

// Skew is the reading's middle: the estimate of the shard's clock minus
// the router's.
func (r Reading) Skew() time.Duration { return r.Low + (r.High-r.Low)/2 }

// Error is half the reading's width: the skew is Skew ± Error.
func (r Reading) Error() time.Duration { return (r.High - r.Low) / 2 }

// String writes the reading as "+1.5ms ±0.8ms".
func (r Reading) String() string {
	return fmt.Sprintf("%s ±%v", signed(r.Skew()), r.Error())
}

// farthest is the largest skew the reading allows, in magnitude.
func (r Reading) farthest() time.Duration { return max(abs(r.Low), abs(r.High)) }

// nearest is the smallest skew the reading allows, in magnitude: 0 when
// its interval holds 0.
func (r Reading) nearest() time.Duration {
	if r.Low <= 0 && r.High >= 0 {
		return 0
	}
	return min(abs(r.Low), abs(r.High))
}

// Verdict is what the readings say of the bound.
type Verdict int

const (
	// Unmeasured: no reading.
	Unmeasured Verdict = iota
	// Within: every reading's whole interval is within the bound.
	Within
	// Unsure: an interval reaches past the bound, but none lies wholly
	// past it: the round trips were too slow to tell.
	Unsure
	// Beyond: an interval lies wholly past the bound.
	Beyond
)

func (v Verdict) String() string {
	switch v {
	case Within:
		return "within"
	case Unsure:
		return "unsure"
	case Beyond:
		return "beyond"
	}
	return "unmeasured"
}

// Judgement is the rule applied to a probe's readings.
type Judgement struct {
	Verdict Verdict
	Bound   time.Duration // see Bound
	// Largest is the reading whose interval reaches farthest from zero
	// (the first of those that reach as far); zero if none.
	Largest Reading
}

// OK reports whether the bound is shown to hold: every shard measured is
// within it. Unsure is not OK: what cannot be shown is not assumed.
func (j Judgement) OK() bool { return j.Verdict == Within }

// Judge applies the rule to readings, one per shard that holds the log:
// the skew allowed is Bound(horizons...), and the verdict is Beyond if
// any reading lies wholly past it, else Unsure if any reaches past it,
// else Within; Unmeasured for no readings. It reads no clock.
func Judge(readings []Reading, horizons ...time.Duration) Judgement {
	j := Judgement{Bound: Bound(horizons...)}
	if len(readings) == 0 {
		return j
	}
	j.Verdict = Within
	for i, r := range readings {
		if i == 0 || r.farthest() > j.Largest.farthest() {
			j.Largest = r
		}
		switch {
		case r.nearest() > j.Bound:
			j.Verdict = Beyond
		case r.farthest() > j.Bound && j.Verdict == Within:
			j.Verdict = Unsure
		}
	}
	return j
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// signed writes d with its sign: "+1.5ms", "-2s", "0s".
func signed(d time.Duration) string {
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}
