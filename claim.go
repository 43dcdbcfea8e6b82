package twopc

// Claims and who drives them: every claim a coordinator writes carries its
// instance's mark, so that it can tell the claims it issued from those of
// another process (another application, or another process sharing its
// application name); and it keeps the transactions one of its own calls
// drives right now. A repeat with a key takes its first attempt over at
// once when the claim is its coordinator's own and no call of it drives
// the transaction (see repeat.go). Neither decides money: every state
// write is guarded by the claim it names, and every leg write by markers,
// fences and the line.

import (
	"crypto/rand"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// claims is a coordinator's claim issuer and its register of the
// transactions its calls drive.
type claims struct {
	mark [5]byte // this instance's: bytes 4 to 8 of every claim it issues

	mu      sync.Mutex
	driving map[bson.ObjectID]*driven
}

// driven is a transaction a call of this coordinator drives: how many
// calls, and a channel closed when the last of them stops.
type driven struct {
	n    int
	done chan struct{}
}

func newClaims() *claims {
	c := &claims{driving: map[bson.ObjectID]*driven{}}
	_, _ = rand.Read(c.mark[:])
	return c
}

// issue returns a new claim, unique as any ObjectID is (its time, and a
// counter), marked as this instance's in place of the driver's
// process-wide random bytes.
func (c *claims) issue() bson.ObjectID {
	id := bson.NewObjectID()
	copy(id[4:9], c.mark[:])
	return id
}

// issued reports whether claim was issued by this instance.
func (c *claims) issued(claim bson.ObjectID) bool {
	return [5]byte(claim[4:9]) == c.mark
}

// drive registers transaction id as driven by a call of this coordinator
// until the returned function is called.
func (c *claims) drive(id bson.ObjectID) (stop func()) {
	c.mu.Lock()
	d := c.driving[id]
	if d == nil {
		d = &driven{done: make(chan struct{})}
		c.driving[id] = d
	}
	d.n++
	c.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if d.n--; d.n == 0 {
				delete(c.driving, id)
				close(d.done)
			}
		})
	}
}

// drivenHere returns, while a call of this coordinator drives transaction
// id, a channel closed once none does; nil when none does.
func (c *claims) drivenHere(id bson.ObjectID) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.driving[id]; d != nil {
		return d.done
	}
	return nil
}

// takeover returns the takeover lease of this coordinator: WithTakeoverAfter,
// never longer than StaleAfter.
func (c *config) takeover() time.Duration {
	return min(c.takeoverAfter, c.staleAfter)
}

// takeoverPerLeg is how much a TransferBatch's takeover lease grows per leg
// it carries: its legs go in shared commands of up to WithWriteBatch
// statements, which a busy server takes seconds to apply, and every one
// must be sent within half the lease of the claims it carries. Measured
// (TestTransferBatchOfMaxBatch/legs=2 under -race beside a shell loop
// spinning a core, 2026-11-28): a batch of MaxBatch two-leg transfers was
// cut by its bound (61 s) at a flat 5 s lease, ended in 14 s at a minute's,
// and in 8.5 s at this one's (20 s for its 2,000 legs).
const takeoverPerLeg = 10 * time.Millisecond

// takeoverFor is the takeover lease of the transfers of a batch of legs
// legs in all: the coordinator's (takeover), or takeoverPerLeg a leg if
// that is longer, never past StaleAfter.
func (c *config) takeoverFor(legs int) time.Duration {
	return min(max(c.takeover(), time.Duration(legs)*takeoverPerLeg), c.staleAfter)
}

// shortestLease is the shortest takeover lease of recs, whose legs one
// apply write carries (own: the coordinator's StaleAfter, see
// takeoverLease).
func shortestLease(recs []*record, own time.Duration) time.Duration {
	lease := own
	for _, r := range recs {
		lease = min(lease, r.takeoverLease(own))
	}
	return lease
}

// takeoverLease is the takeover lease recorded in r by its owner, or, for
// a transaction that records none (a placeholder), its abort lease.
func (r *record) takeoverLease(own time.Duration) time.Duration {
	if r.TakeoverMs > 0 {
		return time.Duration(r.TakeoverMs) * time.Millisecond
	}
	return r.lease(own)
}
