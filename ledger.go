package twopc

import (
	"context"
	"errors"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Ledger is the participant side of two-phase commit (in its classic
// two-banks example, the banks, which hold the accounts, beside the
// coordinator, which keeps the log): one named accounts collection, in
// the coordinator's database, another database, or another deployment
// (see WithLedger), and the guarded writes that apply, inspect, settle,
// fence, undo and unfence legs there. It never reads or moves a
// transaction's state: the Coordinator decides, from its log, and tells
// each ledger what to do with its legs. Every write is guarded by the
// leg's own marker (and, for applying, the account's fence line), so that
// whoever sends it, however often and however late, it takes effect at
// most once.
type Ledger struct {
	*config
	name     string
	accounts *mongo.Collection
	kinds    accountKinds // which accounts have limits, as last read
	shards   *shardCheck  // the accounts' shard key, read and allowed once (shardkey.go)
}

// Name returns the ledger's name; the default ledger's is "".
func (l *Ledger) Name() string { return l.name }

// OpenAccount inserts an account document in l with the given balance, in the
// shape the protocol expects: {_id, balance (int64), pendingTransactions: []},
// with what opts give: an asset (AccountAsset), and limits (AccountFloor,
// AccountCeiling), kept by the floor, ceiling and rooms fields that every
// leg write then checks and moves (see SetLimits to give limits later).
// If a rollback left fences under this id while the account did not exist
// (a tombstone), the account takes them over, so that no stalled leg of a
// canceled transaction can apply to it.
//
// An id that names an account already gives ErrAccountExists, and the
// account is left as it was; an id that cannot be an account's,
// ErrInvalidAccountID; a balance below zero with no limits,
// ErrNegativeBalance; a balance outside the limits given,
// ErrLimitExceeded; an asset code or limits that are not valid,
// ErrInvalidAccount. Those four write nothing. It is bounded as a money
// call is (WithCallTimeout): with no server answering it fails within the
// bound, with an error that wraps context.DeadlineExceeded and names it.
func (l *Ledger) OpenAccount(ctx context.Context, id any, balance int64, opts ...AccountOption) (err error) {
	ctx, b := l.config.bound(ctx)
	defer func() { err = b.explain(err); b.end() }()
	if err := validateAccountID("account", id); err != nil {
		return errorf("twopc: open account: %w", err)
	}
	if err := l.shards.need(ctx); err != nil {
		return errorf("twopc: open account %v: %w", id, err)
	}
	cfg := accountOptions(opts)
	set := bson.D{{Key: fieldBalance, Value: balance}, {Key: fieldPending, Value: bson.A{}}}
	if cfg.assetSet {
		if err := schema.ValidAsset(cfg.asset); err != nil {
			return errorf("twopc: open account %v: %w: %w", id, ErrInvalidAccount, err)
		}
		set = append(set, bson.E{Key: fieldAsset, Value: cfg.asset})
	}
	if len(cfg.metadata) > 0 {
		if err := checkMetadata(cfg.metadata); err != nil {
			return errorf("twopc: open account %v: %w: %w", id, ErrInvalidAccount, err)
		}
		set = append(set, bson.E{Key: fieldMetadata, Value: metadataDoc(cfg.metadata)})
	}
	switch {
	case cfg.limited():
		lim, err := limitsOf(cfg, limits{})
		if err != nil {
			return errorf("twopc: open account %v: %w", id, err)
		}
		if balance < lim.floor || balance > lim.ceiling {
			return errorf("twopc: open account %v: %w: balance %d outside [%d, %d]", id, ErrLimitExceeded, balance, lim.floor, lim.ceiling)
		}
		floorRoom, ceilingRoom, _ := lim.rooms(balance, 0, 0) // within the limits: they fit
		set = append(set, lim.fields(floorRoom, ceilingRoom)...)
	case balance < 0:
		return errorf("twopc: open account %v: %w: %d", id, ErrNegativeBalance, balance)
	}
	// The opening a statement starts from (see Coordinator.Statement):
	// the balance, and the time by the clock corrected to the server's.
	opening := bson.D{{Key: "balance", Value: balance}, {Key: "at", Value: l.mark.stamp(ctx)}}
	set = append(set, bson.E{Key: fieldOpening, Value: opening})
	// Opened: a transfer naming it is not read for it, and an account
	// with limits has its legs' writes written for its kind at once.
	opened := func() error {
		l.kinds.opened(id, cfg.asset, cfg.limited())
		return nil
	}
	// Opened adopted (see adoptModel): no fences yet, a line below every
	// transaction, and the mark.
	marked := bson.E{Key: fieldAdopted, Value: true}
	adopted := bson.D{{Key: fieldFencedLegs, Value: bson.A{}}, {Key: fieldFencedBefore, Value: time.UnixMilli(0).UTC()}, marked}
	_, err = l.accounts.InsertOne(ctx, append(append(bson.D{{Key: "_id", Value: id}}, set...), adopted...))
	if mongo.IsDuplicateKeyError(err) {
		// A tombstone keeps its fences and its line (the $max sets one
		// where it has none).
		res, uerr := l.accounts.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: fieldTombstone, Value: true},
			{Key: fieldFencedLegs, Value: bson.D{{Key: "$type", Value: "array"}}}}, bson.D{
			{Key: "$set", Value: append(set, marked)},
			{Key: "$max", Value: bson.D{{Key: fieldFencedBefore, Value: time.UnixMilli(0).UTC()}}},
			{Key: "$unset", Value: bson.D{{Key: fieldTombstone, Value: ""}}},
		})
		if uerr == nil && res.ModifiedCount == 1 {
			return opened()
		}
		if uerr == nil {
			return errorf("twopc: open account %v: %w", id, ErrAccountExists)
		}
	}
	if err != nil {
		return errorf("twopc: open account %v: %w", id, err)
	}
	return opened()
}

// Account is an account document as the protocol sees it.
//
// A debit leaves Balance as soon as its leg applies (the funds are held,
// in Held), but a credit reaches Balance only when its transfer settles,
// after the commit point; until then it is in PendingCredit. So money that
// might still be rolled back cannot be spent, and undoing a credit never
// takes a balance below zero. There is no isolation: between a transfer's
// apply and its settle (with background settling, for milliseconds after
// Transfer returns) a reader sees the debit gone from the source's Balance
// and the credit only in the destination's PendingCredit, and it sees a
// rolled back debit until it is undone. The credit of a committed
// transfer is spendable all the same: a debit that Balance refuses first
// settles, on its account, the committed transfers waiting there, and is
// tried again (see Coordinator.Transfer). WithSyncSettle makes Transfer
// return with the credit in Balance. A hold keeps its amounts in Held and
// PendingCredit until it is captured and settled, voided or expired (see
// Coordinator.Hold).
type Account struct {
	ID any
	// Balance is the available balance: it includes the debits of pending
	// transfers and holds (the funds are held) and only the credits that
	// are settled.
	Balance int64
	// PendingCredit is the sum of the credits applied to the account and
	// not yet settled: money on its way in, spendable once settled. A
	// hold's credit stays here while it is held.
	PendingCredit int64
	// Held is the sum of the debits applied to the account and not yet
	// settled, already out of Balance: the amounts its holds reserve
	// (until captured and settled, voided or expired; see
	// Coordinator.Hold), and for a moment those of transfers on their way
	// out. It is the account document's pendingDebit.
	Held int64
	// PendingTransactions lists the transactions with a leg applied to the
	// account and not yet settled (each leg marker read as its
	// transaction's id: the marker with its last byte cleared).
	PendingTransactions []bson.ObjectID
	// Asset is the account's asset code (AccountAsset); "" for none.
	Asset string
	// Limited says the account has limits (AccountFloor, AccountCeiling,
	// SetLimits): Floor is its lowest balance allowed and Ceiling its
	// highest (MaxLimit if it has none of its own). Without limits both
	// are 0, and the coordinator's policy governs (WithAllowNegative).
	Limited        bool
	Floor, Ceiling int64
	// CommittedCredit is what settling the committed transactions with a
	// leg on the account (state applied, not yet settled) will add to
	// Balance: their credits, and the part of a partly captured hold's
	// debit that returns. It is part of PendingCredit, and already
	// spendable: a debit that Balance alone refuses settles them on the
	// account first (see Coordinator.Transfer). Coordinator.Account reads
	// it from the log by the account's markers; Ledger.Account, which
	// never reads the log, leaves it zero.
	CommittedCredit int64
	// Metadata is what AccountMetadata gave the account when it was
	// opened; nil if none (or if the document's "metadata" is not a
	// document of strings, such as a field a user added by hand).
	Metadata map[string]string
}

// Account reads account id: ErrAccountNotFound if there is none,
// ErrInvalidAccountID for an id that cannot be an account's.
func (l *Ledger) Account(ctx context.Context, id any) (*Account, error) {
	return readWithin(ctx, l.config, "account", func(ctx context.Context) (*Account, error) {
		out, _, err := l.account(ctx, id)
		return out, err
	})
}

// account reads account id as Account does, and returns with it the leg
// markers its pendingTransactions holds.
func (l *Ledger) account(ctx context.Context, id any) (*Account, []bson.ObjectID, error) {
	if err := validateAccountID("account", id); err != nil {
		return nil, nil, errorf("twopc: account: %w", err)
	}
	var a account
	err := l.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}},
		options.FindOne().SetProjection(publicAccountProjection)).Decode(&a)
	if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && a.Tombstone) {
		return nil, nil, errorf("%w: %v", ErrAccountNotFound, id)
	}
	if err != nil {
		return nil, nil, errorf("twopc: account %v: %w", id, err)
	}
	out, err := a.public(id)
	if err != nil {
		return nil, nil, err
	}
	return out, a.pending(), nil
}

// publicAccountProjection is what an Account is made of (see
// account.public).
var publicAccountProjection = bson.D{{Key: fieldMetadata, Value: 1}, {Key: fieldBalance, Value: 1}, {Key: fieldPendingCredit, Value: 1}, {Key: fieldPendingDebit, Value: 1},
	{Key: fieldPending, Value: 1}, {Key: fieldTombstone, Value: 1}, {Key: fieldAsset, Value: 1}, {Key: fieldFloor, Value: 1},
	{Key: fieldCeiling, Value: 1}, {Key: fieldFloorRoom, Value: 1}}

// public is account document a, of id id, as an Account (CommittedCredit
// zero); ErrInvalidAccount if its balance is not an integer, or its asset
// or limits are not valid. A tombstone is the caller's to refuse.
func (a *account) public(id any) (*Account, error) {
	b, ok := a.balance()
	if !ok {
		return nil, errorf("%w: %v", ErrInvalidAccount, id)
	}
	var txns []bson.ObjectID
	for _, m := range a.pending() {
		if t := schema.TxnOfMarker(m); !has(txns, t) {
			txns = append(txns, t)
		}
	}
	out := &Account{ID: id, Balance: b, PendingCredit: a.credit(), Held: a.heldDebit(), PendingTransactions: txns}
	if m, ok := decodeMetadata(a.Metadata); ok && len(m) > 0 {
		out.Metadata = m
	}
	if asset, ok := a.assetOf(); ok {
		out.Asset = asset
	} else {
		return nil, errorf("%w: %v has %s", ErrInvalidAccount, id, assetName(a.Asset))
	}
	if a.limited() {
		lim, ok := a.limits()
		if !ok {
			return nil, errorf("%w: %v has a floor or ceiling that is not an integer", ErrInvalidAccount, id)
		}
		out.Limited, out.Floor, out.Ceiling = true, lim.floor, lim.ceiling
	}
	return out, nil
}

// Balance returns an account's available balance (see Account).
func (l *Ledger) Balance(ctx context.Context, id any) (int64, error) {
	return readWithin(ctx, l.config, "balance", func(ctx context.Context) (int64, error) {
		a, _, err := l.account(ctx, id)
		if err != nil {
			return 0, err
		}
		return a.Balance, nil
	})
}
