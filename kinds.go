package twopc

// The accounts a ledger has seen: that they exist, so that a transfer
// naming them is not read for them again (see engine.refuseMissing);
// their asset, so that a transfer naming none takes theirs, and one naming
// another is refused, before its insert (see engine.fitAssets); and which
// of them have limits, so that the writes that move money on them are
// written for their kind the first time (see leg.limited).

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
// canonical id, each with whether it was seen with limits, and its asset
// if a read or a write gave it. An account is
// added when a read finds it (a tombstone is not an account) or a write
// opens it, and removed when a read finds it missing. It is a hint: every
// write requires the account and the kind it was written for, so a stale
// entry makes a write match nothing (then the account is read, or the
// other kind sent), never move money on an account of the other kind or
// write under an id with no account but a rollback's fence (see
// PROTOCOL.md, Fences).
type accountKinds struct {
	mu   sync.Mutex
	seen map[string]kind // canonical id → what was seen
}

// kindsOf returns the ledger named ledger of ls and the canonical id of
// account in it, and false when ls has no such ledger or account is no
// id: what a check before the insert skips (the apply step names them).
func (ls ledgers) kindsOf(ledger string, account any) (*Ledger, string, bool) {
	l, err := ls.get(ledger)
	if err != nil {
		return nil, "", false
	}
	key, err := schema.IDKey(account)
	if err != nil {
		return nil, "", false
	}
	return l, key, true
}

// kind is what a ledger last saw of an account.
type kind struct {
	limited bool
	asset   string // its asset code; "" for none
	// assetKnown says asset was read or written; else it is to be read
	// before a transfer names the account.
	assetKnown bool
}

// of returns leg l with the kind last seen for its account.
func (k *accountKinds) of(l leg) leg {
	key, err := schema.IDKey(l.account)
	if err != nil {
		return l
	}
	k.mu.Lock()
	l.limited = k.seen[key].limited
	k.mu.Unlock()
	return l
}

// known reports whether the account of canonical id key was last seen to
// exist, and its asset with it.
func (k *accountKinds) known(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.seen[key].assetKnown
}

// assetOf returns the asset last seen of the account of canonical id key,
// and whether one was.
func (k *accountKinds) assetOf(key string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.seen[key]
	return s.asset, s.assetKnown
}

// forgetAsset records that the asset of the account of canonical id key is
// to be read again: a transfer was about to be refused by it.
func (k *accountKinds) forgetAsset(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s, ok := k.seen[key]; ok {
		s.assetKnown = false
		k.seen[key] = s
	}
}

// limitedNow records that account id exists with limits: a write just
// gave them.
func (k *accountKinds) limitedNow(id any) {
	key, err := schema.IDKey(id)
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.seen[key]
	s.limited = true
	k.add(key, s)
}

// opened records that account id exists, of asset and with limits or
// not: a write just made it so.
func (k *accountKinds) opened(id any, asset string, limited bool) {
	key, err := schema.IDKey(id)
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.add(key, kind{limited: limited, asset: asset, assetKnown: true})
}

// add records key as existing, as s says; k.mu is held.
func (k *accountKinds) add(key string, s kind) {
	if _, ok := k.seen[key]; !ok && (k.seen == nil || len(k.seen) >= maxKinds) {
		k.seen = map[string]kind{}
	}
	k.seen[key] = s
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
	asset, ok := a.assetOf()
	k.mu.Lock()
	defer k.mu.Unlock()
	if s := (kind{limited: a.limited(), asset: asset, assetKnown: ok}); k.seen[key] != s {
		k.add(key, s)
	}
}

// exists records that a read found the account of canonical id key, of
// asset (known: a code or none; else the account's asset field is of
// another type, which every leg write refuses) and of a kind it did not
// read: one seen before keeps the kind it was seen with, one not seen is
// taken to have no limits (a write for the other kind then matches
// nothing and reads it).
func (k *accountKinds) exists(key, asset string, known bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := k.seen[key]
	s.asset, s.assetKnown = asset, known
	k.add(key, s)
}
