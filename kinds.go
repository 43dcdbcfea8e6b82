package twopc

// The accounts a ledger has seen: that they exist, so that a transfer
// naming them is not read for them again (see engine.refuseMissing),
// and which of them have limits, so that the writes that move money on
// them are written for their kind the first time (see leg.limited).

import (
	"sync"

	"github.com/twopc/twopc/internal/schema"
)

// maxKinds bounds the accounts a ledger remembers: past it, it forgets
// them all and learns again. Forgetting costs one read (the next transfer
// naming an account reads that it exists), or a write that matches
// nothing and one read, never a wrong write: each write requires its
// kind, and its account.
const maxKinds = 1 << 16

// accountKinds is the set of accounts of one ledger last seen to exist, by
// canonical id, each with whether it was seen with limits. An account is
// added when a read finds it (a tombstone is not an account) or a write
// opens it, and removed when a read finds it missing. It is a hint: every
// write requires the account and the kind it was written for, so a stale
// entry makes a write match nothing (then the account is read, or the
// other kind sent), never move money on an account of the other kind or
// write under an id with no account but a rollback's fence (see
// PROTOCOL.md, Fences).
type accountKinds struct {
	mu   sync.Mutex
	seen map[string]bool // canonical id → seen with limits
}

// of returns leg l with the kind last seen for its account.
func (k *accountKinds) of(l leg) leg {
	key, err := schema.IDKey(l.account)
	if err != nil {
		return l
	}
	k.mu.Lock()
	l.limited = k.seen[key]
	k.mu.Unlock()
	return l
}

// known reports whether the account of canonical id key was last seen to
// exist.
func (k *accountKinds) known(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.seen[key]
	return ok
}

// limitedNow records that account id exists with limits: a write just
// gave them.
func (k *accountKinds) limitedNow(id any) { k.opened(id, true) }

// opened records that account id exists, with limits or not: a write just
// made it so.
func (k *accountKinds) opened(id any, limited bool) {
	key, err := schema.IDKey(id)
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.add(key, limited)
}

// add records key as existing, limited or not; k.mu is held.
func (k *accountKinds) add(key string, limited bool) {
	if _, ok := k.seen[key]; !ok && (k.seen == nil || len(k.seen) >= maxKinds) {
		k.seen = map[string]bool{}
	}
	k.seen[key] = limited
}

// gone records that a read found no account under canonical id key
// (nothing, or a tombstone).
func (k *accountKinds) gone(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.seen, key)
}

// saw records what a read found of account a (nil: nothing to record; a
// tombstone: no account).
func (k *accountKinds) saw(a *account) {
	if a == nil {
		return
	}
	key := schema.CanonicalID(a.ID)
	if a.Tombstone {
		k.gone(key)
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if limited, ok := k.seen[key]; !ok || limited != a.limited() {
		k.add(key, a.limited())
	}
}

// exists records that a read found the account of canonical id key, of a
// kind it did not read: one seen before keeps the kind it was seen with,
// one not seen is taken to have no limits (a write for the other kind
// then matches nothing and reads it).
func (k *accountKinds) exists(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.seen[key]; !ok {
		k.add(key, false)
	}
}
