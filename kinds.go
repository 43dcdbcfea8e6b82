package twopc

// The kinds of accounts a ledger has seen: which accounts have limits, so
// that the writes that move money on them are written for their kind the
// first time (see leg.limited).

import (
	"sync"

	"github.com/twopc/twopc/internal/schema"
)

// maxKinds bounds the accounts with limits a ledger remembers: past it,
// it forgets them all and learns again. Forgetting costs a write that
// matches nothing and one read, never a wrong write: each write requires
// its kind.
const maxKinds = 1 << 16

// accountKinds is the set of accounts of one ledger last seen with limits,
// by canonical id. An account is added when a read finds its rooms, and
// removed when a read finds none. It is a hint: every write requires the
// kind it was written for, so a stale entry makes a write match nothing
// (then the account is read, or the other kind sent), never move money on
// an account of the other kind.
type accountKinds struct {
	mu      sync.Mutex
	limited map[string]bool
}

// of returns leg l with the kind last seen for its account.
func (k *accountKinds) of(l leg) leg {
	key, err := schema.IDKey(l.account)
	if err != nil {
		return l
	}
	k.mu.Lock()
	l.limited = k.limited[key]
	k.mu.Unlock()
	return l
}

// limitedNow records that account id has limits: a write just gave them.
func (k *accountKinds) limitedNow(id any) {
	key, err := schema.IDKey(id)
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.add(key)
}

// add records key as limited; k.mu is held.
func (k *accountKinds) add(key string) {
	if k.limited == nil || len(k.limited) >= maxKinds {
		k.limited = map[string]bool{}
	}
	k.limited[key] = true
}

// saw records what a read found of account a (nil: missing).
func (k *accountKinds) saw(a *account) {
	if a == nil {
		return
	}
	key := schema.CanonicalID(a.ID)
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case !a.limited():
		delete(k.limited, key)
	case !k.limited[key]:
		k.add(key)
	}
}
