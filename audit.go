package twopc

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ErrAuditFailed is what AuditReport.Err wraps when the audit found a
// violation.
var ErrAuditFailed = errors.New("twopc: audit failed")

// Defaults of the audit's options.
const (
	// DefaultAuditBatch is how many documents the audit reads per batch.
	DefaultAuditBatch = 500
	// DefaultPendingBound is the most markers of legs in flight one
	// account may hold before the audit reports it: legs in flight are
	// bounded by the transfers in flight on the account.
	DefaultPendingBound = 1_000
	// DefaultFencedBound is the most fences one account may hold: about
	// 170 kB of markers, twice the 9,000 that doc.go's Limits gives for
	// 100 transfers a second at the default retention and interval.
	DefaultFencedBound = 10_000
)

// Violation kinds, as AuditReport lists them.
const (
	// ViolationOrphanMarker: an account holds the marker of a leg in
	// flight whose transaction is final (done or canceled) or does not
	// exist. Settling and rolling back remove a leg's marker before the
	// transaction becomes final, so this never happens while the protocol
	// is kept.
	ViolationOrphanMarker = "orphan-marker"
	// ViolationStale: a transaction is not final and nobody has touched it
	// for longer than its lease plus the grace (WithStaleGrace): no
	// Recoverer is finishing it.
	ViolationStale = "stale"
	// ViolationMarkerBound: an account holds more markers than the bound
	// (WithMarkerBounds).
	ViolationMarkerBound = "marker-bound"
	// ViolationMalformed: an account whose balance is not an integer, or
	// whose marker arrays are not arrays; or a transaction the protocol
	// could not have written.
	ViolationMalformed = "malformed"
	// ViolationTotal: a ledger's accounts do not hold the total the
	// caller stated (WithExpectedTotal), with nothing in flight.
	ViolationTotal = "total"
	// ViolationHeldWithoutMarker: an account holds a pending credit or a
	// held debit with no leg in flight on it. Applying a leg adds its
	// marker and its amount in one write, and settling or undoing removes
	// both, so the two go together.
	ViolationHeldWithoutMarker = "held-without-marker"
)

// Violation is one broken invariant.
type Violation struct {
	Kind    string        `json:"kind"`
	Ledger  string        `json:"ledger,omitempty"`
	Account any           `json:"account,omitempty"`
	Txn     bson.ObjectID `json:"txn,omitzero"`
	Detail  string        `json:"detail"`
}

func (v Violation) String() string {
	var b strings.Builder
	b.WriteString(v.Kind)
	if v.Account != nil {
		fmt.Fprintf(&b, " account %q/%v", v.Ledger, v.Account)
	}
	if !v.Txn.IsZero() {
		fmt.Fprintf(&b, " txn %s", v.Txn.Hex())
	}
	return b.String() + ": " + v.Detail
}

// TotalCheck is the check of one ledger's total (WithExpectedTotal).
type TotalCheck struct {
	Ledger   string `json:"ledger"`
	Expected int64  `json:"expected"`
	// Actual is the sum over the ledger's accounts of balance plus held
	// debits (pendingDebit): money a debit holds is still its account's
	// until the transfer settles.
	Actual int64 `json:"actual"`
	// Decided is false when transactions were in flight during the audit
	// (unfinished at its start or end, or written since it began): a
	// transfer between its commit and the end of its settling moves money
	// between ledgers' sums, and one that ran while the accounts were read
	// is seen in part, so the figure is not a snapshot and no violation is
	// reported.
	Decided bool `json:"decided"`
	OK      bool `json:"ok"`
}

// AuditReport is what one audit found: counts a health check can serve,
// and every violation.
type AuditReport struct {
	Started  time.Time `json:"started"`  // by the server's clock
	Finished time.Time `json:"finished"` // by the server's clock
	// Transactions counts the transactions by state.
	Transactions map[State]int `json:"transactions"`
	// Unfinished is how many were not final (initial, pending, applied,
	// canceling) at the start of the audit.
	Unfinished int `json:"unfinished"`
	// OldestUnfinished is the age, by the server's clock, of the least
	// recently touched unfinished transaction at the start; 0 if none.
	OldestUnfinished time.Duration `json:"oldestUnfinished"`
	// Accounts counts the account documents read per ledger, tombstones
	// included; Markers and Fences the markers they hold.
	Accounts map[string]int `json:"accounts"`
	Markers  int            `json:"markers"`
	Fences   int            `json:"fences"`
	Totals   []TotalCheck   `json:"totals,omitempty"`
	// Violations lists every broken invariant, at most
	// maxReportedViolations of them; Dropped counts the rest.
	Violations []Violation `json:"violations"`
	Dropped    int         `json:"dropped,omitempty"`
}

// auditLookup is the most transaction ids one lookup of the audit names.
const auditLookup = 1000

// maxReportedViolations bounds the report's size on a badly broken system.
const maxReportedViolations = 1000

// OK reports whether the audit found no violation.
func (r *AuditReport) OK() bool { return len(r.Violations) == 0 && r.Dropped == 0 }

// Err returns nil if the audit found nothing, else an error wrapping
// ErrAuditFailed that names the first violations.
func (r *AuditReport) Err() error {
	if r.OK() {
		return nil
	}
	var parts []string
	for i, v := range r.Violations {
		if i == 3 {
			parts = append(parts, fmt.Sprintf("and %d more", len(r.Violations)+r.Dropped-3))
			break
		}
		parts = append(parts, v.String())
	}
	return fmt.Errorf("%w: %s", ErrAuditFailed, strings.Join(parts, "; "))
}

func (r *AuditReport) add(v Violation) {
	if len(r.Violations) < maxReportedViolations {
		r.Violations = append(r.Violations, v)
	} else {
		r.Dropped++
	}
}

// AuditOption configures one Audit.
type AuditOption func(*auditConfig)

type auditConfig struct {
	batch         int
	pendingBound  int
	fencedBound   int
	grace         time.Duration
	totals        map[string]int64
	totalsOrdered []string
}

// WithAuditBatch sets how many documents the audit reads per batch
// (default DefaultAuditBatch); it never holds more than about one batch of
// accounts and the transactions their markers name.
func WithAuditBatch(n int) AuditOption {
	return func(c *auditConfig) {
		if n > 0 {
			c.batch = n
		}
	}
}

// WithMarkerBounds sets the most markers of legs in flight
// (pendingTransactions) and fences (fencedTransactions) one account may
// hold (defaults DefaultPendingBound and DefaultFencedBound).
func WithMarkerBounds(pending, fenced int) AuditOption {
	return func(c *auditConfig) {
		if pending > 0 {
			c.pendingBound = pending
		}
		if fenced > 0 {
			c.fencedBound = fenced
		}
	}
}

// WithStaleGrace sets how long past its lease an unfinished transaction
// may stay untouched before the audit reports it stale (default
// DefaultInterval, a Recoverer's default interval: a transaction is
// finished by the first pass after its lease ends).
func WithStaleGrace(d time.Duration) AuditOption {
	return func(c *auditConfig) {
		if d >= 0 {
			c.grace = d
		}
	}
}

// WithExpectedTotal states the money ledger ("" for the default) holds:
// the sum over its accounts of balance plus held debits. The audit checks
// it when no transaction is in flight (see TotalCheck).
func WithExpectedTotal(ledger string, total int64) AuditOption {
	return func(c *auditConfig) {
		if _, ok := c.totals[ledger]; !ok {
			c.totalsOrdered = append(c.totalsOrdered, ledger)
		}
		c.totals[ledger] = total
	}
}

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
//   - optionally, each ledger holds the total the caller states
//     (ViolationTotal, WithExpectedTotal).
//
// It reads at majority, in batches, and writes nothing. The error is for
// an audit that could not read; what it found is in the report (see
// AuditReport.Err).
func (c *Coordinator) Audit(ctx context.Context, opts ...AuditOption) (*AuditReport, error) {
	cfg := auditConfig{batch: DefaultAuditBatch, pendingBound: DefaultPendingBound, fencedBound: DefaultFencedBound,
		grace: DefaultInterval, totals: map[string]int64{}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	for _, name := range cfg.totalsOrdered {
		if _, err := c.Ledger(name); err != nil {
			return nil, fmt.Errorf("twopc: audit: %w", err)
		}
	}
	now, err := c.serverNow(ctx)
	if err != nil {
		return nil, fmt.Errorf("twopc: audit: %w", err)
	}
	rep := &AuditReport{Started: now, Transactions: map[State]int{}, Accounts: map[string]int{}}
	if err := c.auditTransactions(ctx, &cfg, rep); err != nil {
		return nil, fmt.Errorf("twopc: audit: %w", err)
	}
	inFlight := rep.Unfinished > 0
	sums := map[string]int64{}
	for _, name := range c.ledgerNames() {
		sum, err := c.auditLedger(ctx, &cfg, c.ledgers[name], rep)
		if err != nil {
			return nil, fmt.Errorf("twopc: audit: ledger %q: %w", name, err)
		}
		sums[name] = sum
	}
	if len(cfg.totals) > 0 && !inFlight {
		// Nothing was in flight at the start. Was anything by the end, or
		// did a transfer run from start to end while the accounts were
		// read? Either way it was written since the audit began.
		n, err := c.txns.CountDocuments(ctx, bson.D{{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldState, Value: bson.D{{Key: "$in", Value: unfinishedStates}}}},
			bson.D{{Key: fieldLastModified, Value: bson.D{{Key: "$gte", Value: rep.Started}}}},
		}}})
		if err != nil {
			return nil, fmt.Errorf("twopc: audit: %w", err)
		}
		inFlight = n > 0
	}
	for _, name := range cfg.totalsOrdered {
		tc := TotalCheck{Ledger: name, Expected: cfg.totals[name], Actual: sums[name], Decided: !inFlight}
		tc.OK = tc.Actual == tc.Expected
		if tc.Decided && !tc.OK {
			rep.add(Violation{Kind: ViolationTotal, Ledger: name,
				Detail: fmt.Sprintf("the accounts hold %d, want %d (%+d)", tc.Actual, tc.Expected, tc.Actual-tc.Expected)})
		}
		rep.Totals = append(rep.Totals, tc)
	}
	if rep.Finished, err = c.serverNow(ctx); err != nil {
		return nil, fmt.Errorf("twopc: audit: %w", err)
	}
	return rep, nil
}

// ledgerNames returns the coordinator's ledgers, the default first, then
// in the order they were given.
func (c *Coordinator) ledgerNames() []string {
	names := []string{""}
	for _, spec := range c.config.ledgers {
		names = append(names, spec.name)
	}
	return names
}

var unfinishedStates = bson.A{StateInitial, StatePending, StateApplied, StateCanceling}

// auditTransactions counts the transactions by state and checks every
// unfinished one against its lease, reading them in batches.
func (c *Coordinator) auditTransactions(ctx context.Context, cfg *auditConfig, rep *AuditReport) error {
	for _, s := range []State{StateInitial, StatePending, StateApplied, StateDone, StateCanceling, StateCanceled} {
		n, err := c.txns.CountDocuments(ctx, bson.D{{Key: fieldState, Value: s}})
		if err != nil {
			return err
		}
		rep.Transactions[s] = int(n)
	}
	cur, err := c.txns.Find(ctx, bson.D{{Key: fieldState, Value: bson.D{{Key: "$in", Value: unfinishedStates}}}},
		options.Find().SetSort(bson.D{{Key: fieldLastModified, Value: 1}}).SetBatchSize(int32(cfg.batch)))
	if err != nil {
		return err
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		rep.Unfinished++
		var r record
		if err := cur.Decode(&r); err != nil {
			rep.add(Violation{Kind: ViolationMalformed, Detail: fmt.Sprintf("transaction %v: %v", cur.Current.Lookup("_id"), err)})
			continue
		}
		if err := r.check(); err != nil {
			rep.add(Violation{Kind: ViolationMalformed, Txn: r.ID, Detail: err.Error()})
			continue
		}
		age := rep.Started.Sub(r.LastModified)
		if rep.Unfinished == 1 {
			rep.OldestUnfinished = max(age, 0)
		}
		if limit := r.lease(c.staleAfter) + cfg.grace; age > limit {
			rep.add(Violation{Kind: ViolationStale, Txn: r.ID, Detail: fmt.Sprintf("%s, untouched for %v, past its lease and grace of %v (application %q)",
				r.State, age.Round(time.Millisecond), limit, r.Application)})
		}
	}
	return cur.Err()
}

// auditLedger checks the accounts of l in batches and returns the sum of
// their balances and held debits.
func (c *Coordinator) auditLedger(ctx context.Context, cfg *auditConfig, l *Ledger, rep *AuditReport) (int64, error) {
	cur, err := l.accounts.Find(ctx, bson.D{},
		options.Find().SetProjection(accountProjection).SetSort(bson.D{{Key: "_id", Value: 1}}).SetBatchSize(int32(cfg.batch)))
	if err != nil {
		return 0, err
	}
	defer cur.Close(ctx)
	var sum int64
	overflow := false
	batch := make([]*account, 0, cfg.batch)
	flush := func() error {
		err := c.auditMarkers(ctx, l, batch, rep)
		batch = batch[:0]
		return err
	}
	for cur.Next(ctx) {
		var a account
		if err := cur.Decode(&a); err != nil {
			rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Account: cur.Current.Lookup("_id"), Detail: err.Error()})
			continue
		}
		rep.Accounts[l.name]++
		id := rawID(a.ID)
		pending, fenced := a.pending(), a.fenced()
		rep.Markers += len(pending)
		rep.Fences += len(fenced)
		for _, f := range []struct {
			name string
			raw  bson.RawValue
		}{{fieldPending, a.PendingIDs}, {fieldFenced, a.FencedIDs}} {
			if _, ok := f.raw.ArrayOK(); f.raw.Type != 0 && !ok {
				rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Account: id, Detail: fmt.Sprintf("%s is a %s, not an array", f.name, f.raw.Type)})
			}
		}
		if len(pending) == 0 && (a.credit() != 0 || a.heldDebit() != 0) {
			rep.add(Violation{Kind: ViolationHeldWithoutMarker, Ledger: l.name, Account: id,
				Detail: fmt.Sprintf("pendingCredit %d and pendingDebit %d with no leg in flight", a.credit(), a.heldDebit())})
		}
		if len(pending) > cfg.pendingBound || len(fenced) > cfg.fencedBound {
			rep.add(Violation{Kind: ViolationMarkerBound, Ledger: l.name, Account: id,
				Detail: fmt.Sprintf("%d markers of legs in flight (bound %d), %d fences (bound %d)", len(pending), cfg.pendingBound, len(fenced), cfg.fencedBound)})
		}
		if !a.Tombstone {
			b, ok := a.balance()
			if !ok {
				rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Account: id, Detail: fmt.Sprintf("balance is a %s, not an integer", a.Balance.Type)})
			} else if !overflow {
				for _, x := range []int64{b, a.heldDebit()} {
					if (x > 0 && sum > math.MaxInt64-x) || (x < 0 && sum < math.MinInt64-x) {
						overflow = true
					}
					sum += x
				}
			}
		}
		if len(pending) > 0 {
			acct := a
			if batch = append(batch, &acct); len(batch) == cfg.batch {
				if err := flush(); err != nil {
					return 0, err
				}
			}
		}
	}
	if err := cur.Err(); err != nil {
		return 0, err
	}
	if len(batch) > 0 {
		if err := flush(); err != nil {
			return 0, err
		}
	}
	if overflow {
		rep.add(Violation{Kind: ViolationMalformed, Ledger: l.name, Detail: "the sum of the ledger's balances is outside int64"})
	}
	return sum, nil
}

// rawID is an account's _id as a Go value, for the report.
func rawID(v bson.RawValue) any {
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	if n, ok := v.AsInt64OK(); ok {
		return n
	}
	return v.String()
}

// auditMarkers checks that every marker on accts names a transaction that
// exists and is not final. A marker found with a final or missing
// transaction is checked again on a fresh majority read of its account:
// the transfer may have settled or rolled back since the account was read.
func (c *Coordinator) auditMarkers(ctx context.Context, l *Ledger, accts []*account, rep *AuditReport) error {
	ids := map[bson.ObjectID]bool{}
	for _, a := range accts {
		for _, m := range a.pending() {
			ids[schema.TxnOfMarker(m)] = true
		}
	}
	list := make(bson.A, 0, len(ids))
	for id := range ids {
		list = append(list, id)
	}
	state := map[bson.ObjectID]State{}
	// At most auditLookup ids a query: accounts near their marker bound
	// must not make one query larger than a command may be.
	for len(list) > 0 {
		part := list[:min(len(list), auditLookup)]
		list = list[len(part):]
		cur, err := c.txns.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: part}}}},
			options.Find().SetProjection(bson.D{{Key: fieldState, Value: 1}}))
		if err != nil {
			return err
		}
		var found []struct {
			ID    bson.ObjectID `bson:"_id"`
			State State         `bson:"state"`
		}
		if err := cur.All(ctx, &found); err != nil {
			return err
		}
		for _, t := range found {
			state[t.ID] = t.State
		}
	}
	for _, a := range accts {
		var suspects []bson.ObjectID
		for _, m := range a.pending() {
			if s, ok := state[schema.TxnOfMarker(m)]; !ok || s.Final() {
				suspects = append(suspects, m)
			}
		}
		if len(suspects) == 0 {
			continue
		}
		var fresh account
		err := l.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: a.ID}}, options.FindOne().SetProjection(accountProjection)).Decode(&fresh)
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return err
		}
		for _, m := range suspects {
			if !has(fresh.pending(), m) {
				continue // settled or undone since the first read
			}
			what := "does not exist"
			if s, ok := state[schema.TxnOfMarker(m)]; ok {
				what = "is " + string(s)
			}
			rep.add(Violation{Kind: ViolationOrphanMarker, Ledger: l.name, Account: rawID(a.ID), Txn: schema.TxnOfMarker(m),
				Detail: fmt.Sprintf("the account holds marker %s of a leg in flight, but its transaction %s", m.Hex(), what)})
		}
	}
	return nil
}
