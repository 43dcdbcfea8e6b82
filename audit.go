package twopc

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Audit checks, on a live system and without stopping it, the invariants
// the protocol keeps, over the transactions collection and every ledger's
// accounts:
//
//   - every marker of a leg in flight on an account names a transaction
//     that exists and is not final (ViolationOrphanMarker); a marker seen
//     with a final transaction is read again, at majority, before it is
//     reported, so a transfer that settled during the audit is not one;
//   - no unfinished transaction has been left untouched past its recorded
//     lease plus the grace (ViolationStale);
//   - an account holds a pending credit or a held debit only while a leg
//     is in flight on it (ViolationHeldWithoutMarker);
//   - every account's marker arrays are within their bounds
//     (ViolationMarkerBound), and every account and transaction has the
//     shape the protocol writes (ViolationMalformed);
//   - every held hold has each leg's marker on its account, and each
//     account holds at least its held holds' debits in pendingDebit and
//     credits in pendingCredit (ViolationHoldNotOnAccount);
//   - optionally, each ledger holds the total the caller states
//     (ViolationTotal, WithExpectedTotal).
//
// Two reads are never one snapshot: a check that compares documents read
// apart (a marker with its transaction, a hold with its accounts) reports
// only what a second look, read in the order that cannot mislead, finds
// again, so a transfer settling or a hold captured or voided during the
// audit is not reported. A total is decided only if no transaction was
// in flight or written while the accounts were read.
//
// It reads at majority, in batches, and writes nothing. The error is for
// an audit that could not read; what it found is in the report (see
// AuditReport.Err). The audit as a whole is not bounded: each of its
// round trips is, by the read bound (WithReadTimeout): each count, each
// batch its cursors fetch, and each batch's lookups (its accounts'
// markers' transactions, its holds' accounts).
func (c *Coordinator) Audit(ctx context.Context, opts ...AuditOption) (_ *AuditReport, err error) {
	cfg := auditConfig{batch: DefaultAuditBatch, pendingBound: DefaultPendingBound, fencedBound: DefaultFencedBound,
		grace: DefaultInterval, totals: map[totalKey]int64{}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	for _, k := range cfg.totalsOrdered {
		if _, err := c.Ledger(k.ledger); err != nil {
			return nil, errorf("twopc: audit: %w", err)
		}
	}
	b := c.readTrips(ctx, "audit")
	defer func() { err = b.explain(err) }()
	now, err := roundTrip(ctx, b, c.log.serverNow)
	if err != nil {
		return nil, errorf("twopc: audit: %w", err)
	}
	rep := &AuditReport{Started: now, Transactions: map[State]int{}, Accounts: map[string]int{}, Tombstones: map[string]int{},
		Assets: map[string][]string{}}
	au := &audit{c: c, cfg: cfg, rep: rep, b: b}
	if err := au.transactions(ctx); err != nil {
		return nil, errorf("twopc: audit: %w", err)
	}
	if err := au.holds(ctx); err != nil {
		return nil, errorf("twopc: audit: %w", err)
	}
	inFlight := rep.Unfinished > 0
	sums := map[totalKey]int64{}
	for _, name := range c.ledgerNames() {
		sum, perAsset, err := au.ledger(ctx, c.ledgers[name])
		if err != nil {
			return nil, errorf("twopc: audit: ledger %q: %w", name, err)
		}
		sums[totalKey{ledger: name}] = sum
		for asset, s := range perAsset {
			sums[totalKey{ledger: name, asset: asset, byAsset: true}] = s
		}
		rep.Assets[name] = append([]string{}, slices.Sorted(maps.Keys(perAsset))...)
	}
	if len(cfg.totals) > 0 && !inFlight {
		// Nothing was in flight at the start. Was anything by the end, or
		// did a transfer run from start to end while the accounts were
		// read? Either way it was written since the audit began.
		n, err := roundTrip(ctx, b, func(ctx context.Context) (int64, error) {
			return c.log.txns.CountDocuments(ctx, bson.D{{Key: "$or", Value: bson.A{
				bson.D{{Key: fieldState, Value: bson.D{{Key: "$in", Value: unfinishedStates}}}},
				bson.D{{Key: fieldLastModified, Value: bson.D{{Key: "$gte", Value: rep.Started}}}},
			}}})
		})
		if err != nil {
			return nil, errorf("twopc: audit: %w", err)
		}
		inFlight = n > 0
	}
	for _, k := range cfg.totalsOrdered {
		tc := TotalCheck{Ledger: k.ledger, Asset: k.asset, ByAsset: k.byAsset, Expected: cfg.totals[k], Actual: sums[k], Decided: !inFlight}
		tc.OK = tc.Actual == tc.Expected
		if tc.Decided && !tc.OK {
			of := "the accounts"
			if k.byAsset {
				of = "the accounts of " + assetLabel(k.asset)
			}
			rep.add(Violation{Kind: ViolationTotal, Ledger: k.ledger,
				Detail: fmt.Sprintf("%s hold %d, want %d (%+d)", of, tc.Actual, tc.Expected, tc.Actual-tc.Expected)})
		}
		rep.Totals = append(rep.Totals, tc)
	}
	if rep.Finished, err = roundTrip(ctx, b, c.log.serverNow); err != nil {
		return nil, errorf("twopc: audit: %w", err)
	}
	return rep, nil
}

// ledgerNames returns the coordinator's ledgers, the default first, then
// in the order they were given.
func (c *config) ledgerNames() []string {
	names := []string{""}
	for _, spec := range c.ledgers {
		names = append(names, spec.name)
	}
	return names
}

// audit is one Audit call's state: the coordinator it reads, its options,
// the report it fills in, and the bound of its round trips.
type audit struct {
	c   *Coordinator
	cfg auditConfig
	rep *AuditReport
	b   *callBound
}
