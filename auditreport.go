package twopc

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// What an audit reports, and its options: the kinds of violation, the
// report, and the bounds it checks against (the call is in audit.go, the
// checks in auditlog.go, auditaccounts.go and auditholds.go).

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
	// DefaultFencedBound is the most fences one account may hold in
	// fencedLegs: about 170 kB. The low-water mark keeps an account's fences to about the
	// last second of its traffic plus the age of the oldest unfinished
	// transaction, so a hot account at 1,000 legs a second holds about
	// 1,000; more means a transaction unfinished for long.
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
	// ViolationHoldNotOnAccount: a hold in StateHeld whose leg's marker is
	// not on its account, or whose account holds less in pendingDebit
	// (pendingCredit) than the debits (credits) of the holds held on it.
	ViolationHoldNotOnAccount = "hold-not-on-account"
	// ViolationRooms: an account with limits whose rooms are not what its
	// balance, its sums in flight and its limits make them (floorRoom =
	// balance - floor, ceilingRoom = ceiling - balance - pendingDebit -
	// pendingCredit). Every leg write moves them with the money in one
	// update, so only a hand edit of the document makes one: its guards
	// then refuse or allow by the wrong amount. Each account is one
	// document, read at once: no second look is needed.
	ViolationRooms = "rooms"
	// ViolationOutsideLimits: an account with limits whose balance is
	// below its floor, or whose balance with everything in flight is above
	// its ceiling. The guards never take it there; SetLimits moving a
	// limit past the balance does (the account then refuses debits, or
	// credits, until it is back), and so does a hand edit.
	ViolationOutsideLimits = "outside-limits"
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

// TotalCheck is the check of one ledger's total (WithExpectedTotal), or
// of the total of one asset in it (WithExpectedAssetTotal: ByAsset set).
type TotalCheck struct {
	Ledger string `json:"ledger"`
	// Asset and ByAsset: the check is of the accounts of Asset only ("":
	// those with no asset), not of the whole ledger.
	Asset    string `json:"asset,omitempty"`
	ByAsset  bool   `json:"byAsset,omitempty"`
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
	// Accounts counts the accounts read per ledger, not counting
	// tombstones (the documents a rollback leaves under an id whose account
	// was gone when it fenced it: deleted after the coordinator last read
	// it, or while the transfer was in flight; Tombstones counts them);
	// Markers and Fences count the markers
	// and fences both hold.
	Accounts   map[string]int `json:"accounts"`
	Tombstones map[string]int `json:"tombstones,omitempty"`
	// Assets lists, per ledger, the assets of the accounts its total sums,
	// sorted: "" for accounts with none (an account whose asset is
	// malformed is summed and named in none; it is reported). A ledger
	// that lists more than one holds different assets, which its total
	// (WithExpectedTotal) adds together: state each one's instead
	// (WithExpectedAssetTotal).
	Assets map[string][]string `json:"assets"`
	// Held counts the holds in StateHeld the audit checked against their
	// accounts, and HeldValue the value they hold.
	Held      int          `json:"held"`
	HeldValue int64        `json:"heldValue"`
	Markers   int          `json:"markers"`
	Fences    int          `json:"fences"`
	Totals    []TotalCheck `json:"totals,omitempty"`
	// Violations lists every broken invariant, at most
	// 1,000 of them; Dropped counts the rest.
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
	return errorf("%w: %s", ErrAuditFailed, strings.Join(parts, "; "))
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
	totals        map[totalKey]int64
	totalsOrdered []totalKey
}

// totalKey names a total the audit checks: a ledger's, or one asset's in
// it.
type totalKey struct {
	ledger, asset string
	byAsset       bool
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
// (pendingTransactions) and fences (fencedLegs) one account may hold (defaults DefaultPendingBound and
// DefaultFencedBound).
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
//
// The sum is over every asset the ledger's accounts hold: with several
// (AuditReport.Assets names them), state each asset's total
// (WithExpectedAssetTotal) instead.
func WithExpectedTotal(ledger string, total int64) AuditOption {
	return expectTotal(totalKey{ledger: ledger}, total)
}

// WithExpectedAssetTotal states the money of asset ("" for accounts with
// none) that ledger holds: the sum of balance plus held debits over the
// ledger's accounts of that asset. Checked as WithExpectedTotal is.
func WithExpectedAssetTotal(ledger, asset string, total int64) AuditOption {
	return expectTotal(totalKey{ledger: ledger, asset: asset, byAsset: true}, total)
}

func expectTotal(k totalKey, total int64) AuditOption {
	return func(c *auditConfig) {
		if _, ok := c.totals[k]; !ok {
			c.totalsOrdered = append(c.totalsOrdered, k)
		}
		c.totals[k] = total
	}
}
