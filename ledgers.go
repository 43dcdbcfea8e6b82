package twopc

// The ledgers as a set: which ledgers a transfer's legs are on, sending to
// several at once, and uniting their outcomes so that each transfer hears
// only of its own ledgers.

import (
	"context"
	"sync"
)

// ledgers are a coordinator's participants by name ("" is the default
// ledger, the accounts of the coordinator's database): the one place that
// says whether a ledger is known, and that sends to several at once.
type ledgers map[string]*Ledger

// get returns the ledger of that name, or ErrUnknownLedger.
func (ls ledgers) get(name string) (*Ledger, error) {
	l, ok := ls[name]
	if !ok {
		return nil, errorf("%w: %q", ErrUnknownLedger, name)
	}
	return l, nil
}

// cmpErr keeps the first error.
func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// onEach runs f on every ledger (see parallel), and
// returns the first error. f must do nothing on a ledger none of its work
// is on.
func (ls ledgers) onEach(f func(*Ledger) error) error {
	all := make([]*Ledger, 0, len(ls))
	for _, l := range ls {
		all = append(all, l)
	}
	return parallel(len(all), func(i int) error { return f(all[i]) })
}

// perLedger runs f once for each ledger that legs are on, with that
// ledger's legs and their indexes in legs (see parallel), and returns the
// first error; ErrUnknownLedger if a leg is on a ledger the coordinator
// was not given.
func (ls ledgers) perLedger(legs []leg, f func(l *Ledger, mine []leg, idx []int) error) error {
	type part struct {
		l    *Ledger
		mine []leg
		idx  []int
	}
	var parts []*part
	byName := map[string]*part{}
	for i, lg := range legs {
		p := byName[lg.ledger]
		if p == nil {
			l, err := ls.get(lg.ledger)
			if err != nil {
				return err
			}
			p = &part{l: l}
			byName[lg.ledger] = p
			parts = append(parts, p)
		}
		p.mine = append(p.mine, lg)
		p.idx = append(p.idx, i)
	}
	return parallel(len(parts), func(i int) error { return f(parts[i].l, parts[i].mine, parts[i].idx) })
}

// parallel runs f(0) to f(n-1), at once when n > 1 (each may be a round
// trip to another deployment: they overlap), and returns the first error.
func parallel(n int, f func(i int) error) error {
	if n == 1 {
		return f(0)
	}
	var mu sync.Mutex
	var first error
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(i); err != nil {
				mu.Lock()
				first = cmpErr(first, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// knows checks that every leg of legs is on a ledger of the coordinator.
func (ls ledgers) knows(legs []leg) error {
	for _, lg := range legs {
		if _, err := ls.get(lg.ledger); err != nil {
			return err
		}
	}
	return nil
}

// eachFailed runs write on every ledger (it skips legs of other
// ledgers) and returns, by index in recs, why a transaction may not have
// been written: the error of a ledger it has a leg on, never another's. A
// transaction naming a ledger the coordinator lacks is failed. The second
// result is the first of those errors.
func (ls ledgers) eachFailed(ctx context.Context, recs []*record, write func(*Ledger, context.Context, []*record) (map[int]bool, error)) (map[int]error, error) {
	failed := map[int]error{}
	var firstErr error
	for i, r := range recs {
		if err := ls.knows(r.legs()); err != nil {
			failed[i] = errorf("transaction %s: %w", r.ID.Hex(), err)
			firstErr = cmpErr(firstErr, failed[i])
		}
	}
	var mu sync.Mutex
	err := ls.onEach(func(l *Ledger) error {
		f, err := write(l, ctx, recs)
		mu.Lock()
		defer mu.Unlock()
		for i := range f {
			why := err
			if why == nil {
				why = errorf("transaction %s: a write to its leg on ledger %q may not have been applied", recs[i].ID.Hex(), l.name)
			}
			failed[i] = cmpErr(failed[i], why)
		}
		return err
	})
	return failed, cmpErr(firstErr, err)
}

// splitByLedgers splits xs by the set of ledgers the legs of each are on
// (see ledgerSet), in the order each set first appears.
func splitByLedgers[T any](xs []T, legs func(T) []leg) [][]T {
	var parts [][]T
	at := map[string]int{}
	for _, x := range xs {
		k := ledgerSet(legs(x))
		i, ok := at[k]
		if !ok {
			i = len(parts)
			at[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], x)
	}
	return parts
}
