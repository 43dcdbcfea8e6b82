package twopc

import (
	"context"
	"errors"
	"fmt"
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
// ErrInvalidAccount. Those four write nothing.
func (l *Ledger) OpenAccount(ctx context.Context, id any, balance int64, opts ...AccountOption) error {
	if err := validateAccountID("account", id); err != nil {
		return errorf("twopc: open account: %w", err)
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
		l.kinds.opened(id, cfg.limited())
		return nil
	}
	// Opened adopted (see adoptModel): no fences yet, and a line below
	// every transaction.
	adopted := bson.D{{Key: fieldFencedLegs, Value: bson.A{}}, {Key: fieldFencedBefore, Value: time.UnixMilli(0).UTC()}}
	_, err := l.accounts.InsertOne(ctx, append(append(bson.D{{Key: "_id", Value: id}}, set...), adopted...))
	if mongo.IsDuplicateKeyError(err) {
		// A tombstone keeps its fences and its line (the $max sets one
		// where it has none).
		res, uerr := l.accounts.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: fieldTombstone, Value: true},
			{Key: fieldFencedLegs, Value: bson.D{{Key: "$type", Value: "array"}}}}, bson.D{
			{Key: "$set", Value: set},
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
	out, _, err := l.account(ctx, id)
	return out, err
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
	a, err := l.Account(ctx, id)
	if err != nil {
		return 0, err
	}
	return a.Balance, nil
}

// own returns the legs of legs that are on l, and their indexes in legs.
func (l *Ledger) own(legs []leg) ([]leg, []int) {
	var mine []leg
	var idx []int
	for i, lg := range legs {
		if lg.ledger == l.name {
			mine = append(mine, lg)
			idx = append(idx, i)
		}
	}
	return mine, idx
}

// apply sends the guarded writes that apply legs, each of transaction
// recs[i], in unordered commands of at most writeBatch statements: the
// legs that name one account in one statement where they can share one
// (see coalesce, applyAllModel), each other leg in its own (applyModel).
// It returns how many legs are known applied; the server's reasons for
// the legs it refused, by index in legs; the write errors whose outcome is
// unknown (a transient code or a RetryableWriteError label: see
// transientWrite; never a refusal), by index in legs; and the indexes of
// the legs it did not send: a command is not started with less than an
// eighth of StaleAfter left before ctx's deadline (the claims' deadline;
// see applyRound), and its legs and those after it are left unsent, to be
// sent again under renewed claims. Any other failure (whose outcome is
// unknown for the legs of that command) or a write-concern error is
// returned as err.
//
// A command whose count says every statement matched applied every leg
// in it. One that says fewer, or that reports a write error, applied an
// unknown part of its merged statements: their legs are sent again one
// statement each (each guarded by its own marker, so a leg the merged
// statement applied matches nothing), the command counts no leg as known
// applied, and the caller reads the accounts to judge each leg.
func (l *Ledger) apply(ctx context.Context, recs []*record, legs []leg) (int64, map[int]string, map[int]error, []int, error) {
	var modified int64
	refused := map[int]string{}
	unknown := map[int]error{}
	kinded := make([]leg, len(legs))
	for i, lg := range legs {
		kinded[i] = l.kinds.of(lg)
	}
	// statementErrs files the write errors of a command, statement at
	// index k applying legs of[k]: a refusal is its leg's, a transient
	// error leaves its leg's outcome unknown, and an error of a merged
	// statement is no one leg's (its legs go again alone).
	statementErrs := func(bwe mongo.BulkWriteException, of func(k int) []int) {
		for _, we := range bwe.WriteErrors {
			idx := of(we.Index)
			if len(idx) != 1 {
				continue
			}
			if transientWrite(bwe, we) {
				unknown[idx[0]] = writeError(bwe, we)
				continue
			}
			refused[idx[0]] = we.Message
		}
	}
	plan := coalesce(recs, kinded)
	for start := 0; start < len(plan); start += l.writeBatch {
		if d, ok := ctx.Deadline(); ok && start > 0 && time.Until(d) < l.staleAfter/8 {
			var unsent []int
			for _, s := range plan[start:] {
				unsent = append(unsent, s...)
			}
			return modified, refused, unknown, unsent, nil
		}
		stmts := plan[start:min(start+l.writeBatch, len(plan))]
		models := make([]mongo.WriteModel, len(stmts))
		mark := l.mark.line()
		legCount := 0
		for j, s := range stmts {
			models[j] = s.model(recs, kinded, mark)
			legCount += len(s)
		}
		res, err := l.accounts.BulkWrite(ctx, models, unorderedWrite)
		var bwe mongo.BulkWriteException
		if err != nil && !(errors.As(err, &bwe) && bwe.WriteConcernError == nil) {
			return modified, refused, unknown, nil, err
		}
		if err == nil && res != nil && res.ModifiedCount == int64(len(models)) {
			modified += int64(legCount)
			continue
		}
		// Refused by the server, each for its own reason, at the index
		// of its statement, as MongoDB reports write errors (the dev
		// server's front makes FerretDB's replies so). The accounts are
		// read whatever it says: a wrong index could only call a leg
		// refused that the read finds nothing wrong with, which then
		// fails its transfer with ErrInvalidAccount rather than apply
		// twice. A transient one (a primary stepping down, a shard's
		// failover) is no refusal: its outcome is unknown, and the leg is
		// sent again (it applies at most once). The legs of a merged
		// statement that failed or may not have matched go again alone.
		statementErrs(bwe, func(k int) []int {
			if k < 0 || k >= len(stmts) {
				return nil
			}
			return stmts[k]
		})
		var again []int
		for _, s := range stmts {
			if len(s) > 1 {
				again = append(again, s...)
			}
		}
		if len(again) == 0 {
			continue
		}
		alone := make([]mongo.WriteModel, len(again))
		for j, i := range again {
			alone[j] = applyModel(recs[i], kinded[i], mark)
		}
		_, err = l.accounts.BulkWrite(ctx, alone, unorderedWrite)
		var abwe mongo.BulkWriteException
		if err != nil && !(errors.As(err, &abwe) && abwe.WriteConcernError == nil) {
			return modified, refused, unknown, nil, err
		}
		statementErrs(abwe, func(k int) []int {
			if k < 0 || k >= len(again) {
				return nil
			}
			return []int{again[k]}
		})
	}
	return modified, refused, unknown, nil, nil
}

// closeLegs closes the legs of committed transactions recs: it pulls each
// leg's marker from pendingTransactions while fencing it and moving a
// credit from pendingCredit to the balance (a debit's hold from
// pendingDebit), guarded by the marker, so it happens once. It returns the
// indexes in recs of the transactions a leg of which may not have closed.
//
// The legs of one account close in one statement (closeAllModel), which
// matches only while every one of their markers is pending: one that finds
// a marker gone (closed by another settler) matches nothing, and its legs
// are then closed one statement each, each guarded by its own marker.
//
// Each statement is written for the kind of account (with limits or
// without) the ledger last saw (see leg.limited), and requires it. The
// legs of one that may not have matched (a leg closed by someone else, or
// an account of the other kind: one given limits since, or one this
// process has not read yet) are closed one by one by marker and kind
// read (see byKind): a leg whose marker is still pending is closed for
// the kind its account has, once.
func (l *Ledger) closeLegs(ctx context.Context, recs []*record) (map[int]bool, error) {
	type group struct {
		legs    []leg
		owners  []int                   // every index in recs with a leg here
		markers map[bson.ObjectID][]int // each leg's marker: every index in recs that carries it
	}
	var order []string
	groups := map[string]*group{}
	for i, r := range recs {
		mine, _ := l.own(r.legs())
		for _, lg := range mine {
			lg = l.kinds.of(lg)
			key, err := schema.IDKey(lg.account)
			if err != nil {
				key = fmt.Sprintf("\x00leg %d %s", i, lg.marker.Hex()) // alone
			}
			g := groups[key]
			if g == nil {
				g = &group{markers: map[bson.ObjectID][]int{}}
				groups[key] = g
				order = append(order, key)
			}
			g.owners = append(g.owners, i)
			seen := len(g.markers[lg.marker]) > 0
			g.markers[lg.marker] = append(g.markers[lg.marker], i)
			if seen {
				// The same leg again (a batch naming one transaction
				// twice): one statement must not count it twice.
				continue
			}
			g.legs = append(g.legs, lg)
		}
	}
	var models []mongo.WriteModel
	var owners [][]int // owners[i]: the indexes in recs of models[i]'s legs
	var merged []*group
	var single []leg // single[i]: models[i]'s leg, if it closes one
	confirm := map[int]bool{}
	for _, key := range order {
		g := groups[key]
		if len(g.legs) > 1 {
			if m, ok := closeAllModel(g.legs); ok {
				confirm[len(models)] = true
				models = append(models, m)
				owners = append(owners, g.owners)
				merged = append(merged, g)
				single = append(single, leg{})
				continue
			}
		}
		for _, lg := range g.legs {
			confirm[len(models)] = true
			models = append(models, closeModel(lg))
			owners = append(owners, g.markers[lg.marker])
			merged = append(merged, nil)
			single = append(single, lg)
		}
	}
	failedModels, unconfirmed, err := l.writeConfirmed(ctx, models, confirm)
	for i := range failedModels {
		delete(unconfirmed, i) // failed: reported, and recovery tries again
	}
	failed := map[int]bool{}
	for i := range failedModels {
		for _, o := range owners[i] {
			failed[o] = true
		}
	}
	// A statement that may not have matched, or that the server refused
	// (a write error: it did not apply), has its legs closed one by one,
	// each guarded by its own marker, for the kind its account is read
	// with; a leg that fails then fails every transaction of the batch
	// that carries it.
	var alone []leg
	var aloneOwners [][]int
	for i := range unconfirmed {
		if merged[i] == nil {
			alone, aloneOwners = append(alone, single[i]), append(aloneOwners, owners[i])
			continue
		}
		for _, lg := range merged[i].legs {
			alone, aloneOwners = append(alone, lg), append(aloneOwners, merged[i].markers[lg.marker])
		}
	}
	if len(alone) > 0 {
		more, aerr := l.byKind(ctx, alone, closeModel)
		for k := range more {
			for _, o := range aloneOwners[k] {
				failed[o] = true
			}
		}
		err = cmpErr(err, aerr)
	}
	return failed, err
}

// maxKindRounds bounds byKind's read-and-write rounds. An account only
// ever gains limits, so two rounds see every change of kind; a third
// covers a write that failed in between.
const maxKindRounds = 3

// byKind writes model(lg) for each leg of legs whose marker is still
// pending on its account, a statement each, for the kind of account it is
// read with (the read records the kinds: see Ledger.inspect), and reads
// again those that may not have matched, up to maxKindRounds. A leg whose
// marker is not pending (closed or undone by someone else, or never
// applied) needs nothing. Each statement is guarded by the leg's marker,
// so a leg is closed (undone) once however the rounds interleave with
// other writers. It returns the indexes of the legs that may still be
// pending, and, if there are any, an error: the server's, for a statement
// it refused (sent once more, unconfirmed, to learn it), or one saying
// they kept not matching.
func (l *Ledger) byKind(ctx context.Context, legs []leg, model func(leg) mongo.WriteModel) (map[int]bool, error) {
	left := make([]int, len(legs))
	for i := range left {
		left[i] = i
	}
	var last []mongo.WriteModel // the statements of the last round still unconfirmed
	for round := 0; round < maxKindRounds && len(left) > 0; round++ {
		read := make([]leg, len(left))
		for j, i := range left {
			read[j] = legs[i]
		}
		accts, err := l.inspect(ctx, read)
		if err != nil {
			return indexSet(left), err
		}
		var models []mongo.WriteModel
		var of []int
		confirm := map[int]bool{}
		for j, i := range left {
			a := accts[j]
			if a == nil || !has(a.pending(), legs[i].marker) {
				continue // nothing to do here
			}
			lg := legs[i]
			lg.limited = a.limited()
			confirm[len(models)] = true
			models, of = append(models, model(lg)), append(of, i)
		}
		failed, unconfirmed, err := l.writeConfirmed(ctx, models, confirm)
		if err != nil {
			return indexSet(of), err
		}
		left, last = left[:0], last[:0]
		for k, i := range of {
			if failed[k] || unconfirmed[k] {
				left, last = append(left, i), append(last, models[k])
			}
		}
	}
	if len(left) == 0 {
		return nil, nil
	}
	if _, err := l.write(ctx, last); err != nil {
		return indexSet(left), err
	}
	return indexSet(left), errorf("twopc: ledger %q: %d legs' markers still pending after %d reads and writes", l.name, len(left), maxKindRounds)
}

// indexSet is the set of the indexes in is.
func indexSet(is []int) map[int]bool {
	out := make(map[int]bool, len(is))
	for _, i := range is {
		out[i] = true
	}
	return out
}

// findIDs reads the accounts of ids (by _id, with projection), as T,
// retried as every read of the ledger is.
func findIDs[T any](ctx context.Context, l *Ledger, ids bson.A, projection bson.D) ([]T, error) {
	var found []T
	err := l.retry(ctx, func(ctx context.Context) error {
		cur, err := l.accounts.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
			options.Find().SetProjection(projection))
		if err != nil {
			return err
		}
		found = found[:0]
		return cur.All(ctx, &found)
	})
	return found, err
}

// inspect reads the accounts of legs, in order; nil for a missing one.
func (l *Ledger) inspect(ctx context.Context, legs []leg) ([]*account, error) {
	ids := make(bson.A, len(legs))
	for i, lg := range legs {
		ids[i] = lg.account
	}
	found, err := findIDs[account](ctx, l, ids, accountProjection)
	if err != nil {
		return nil, err
	}
	byKey := make(map[string]*account, len(found))
	for j := range found {
		byKey[schema.CanonicalID(found[j].ID)] = &found[j]
		l.kinds.saw(&found[j])
	}
	out := make([]*account, len(legs))
	for i, lg := range legs {
		key, _ := schema.IDKey(lg.account)
		out[i] = byKey[key]
		if out[i] == nil {
			l.kinds.gone(key)
		}
	}
	return out, nil
}

// fenceAndUndo closes legs, the legs on l of canceling transaction r: first
// it fences their accounts, so no leg of it can apply there from now on, whoever sends
// it; then it undoes the legs that were applied (guarded by the id still
// being in pendingTransactions, so an undo happens once). Fencing first is
// what makes the undo final: an apply that raced ahead of the fence is seen
// and undone, one that comes after it matches nothing.
func (l *Ledger) fenceAndUndo(ctx context.Context, r *record, legs []leg) error {
	fences := make([]mongo.WriteModel, len(legs))
	for i, lg := range legs {
		fences[i] = fenceModel(r, lg)
	}
	if err := l.fence(ctx, r, fences); err != nil {
		return err
	}
	// Each undo for the kind of account its leg's account was last seen
	// with (see leg.limited); one that may not have matched (a leg never
	// applied, or an account of the other kind) is undone by marker and
	// kind read (byKind). Then the accounts' lines, which drop their
	// fences below the mark: an account that only ever sees rollbacks
	// stays bounded too.
	return l.try(ctx, StepUndo, r, func(ctx context.Context) error {
		undos := make([]mongo.WriteModel, len(legs))
		confirm := map[int]bool{}
		for i, lg := range legs {
			undos[i], confirm[i] = undoModel(l.kinds.of(lg)), true
		}
		failed, unconfirmed, err := l.writeConfirmed(ctx, undos, confirm)
		if err != nil {
			return err
		}
		var again []leg
		for i := range legs {
			if failed[i] || unconfirmed[i] {
				again = append(again, legs[i])
			}
		}
		if len(again) > 0 {
			// Any leg still pending comes with an error.
			if _, err := l.byKind(ctx, again, undoModel); err != nil {
				return err
			}
		}
		var lines []mongo.WriteModel
		line := lineFor(l.mark.line(), r)
		for _, lg := range legs {
			if m := lineModel(lg, line); m != nil {
				lines = append(lines, m)
			}
		}
		if len(lines) == 0 {
			return nil
		}
		_, err = l.accounts.BulkWrite(ctx, lines, unorderedWrite)
		return err
	})
}

// fence sends r's fence upserts. An upsert that finds the account past its
// fence line (or unable to take a fence) fails on the _id's uniqueness: the
// account is closed to r already, which is what the fence is for. Since a write error may hide
// the statements after it (FerretDB v1 stops a command at its first), a
// command with write errors is sent again a statement at a time, and a
// duplicate key is tried once more (two rollbacks may race to insert one
// tombstone) before it is taken as the fence line's answer.
func (l *Ledger) fence(ctx context.Context, r *record, models []mongo.WriteModel) error {
	send := func(models []mongo.WriteModel) error {
		return l.try(ctx, StepFence, r, func(ctx context.Context) error {
			_, err := l.accounts.BulkWrite(ctx, models, unorderedWrite)
			return err
		})
	}
	err := send(models)
	var bwe mongo.BulkWriteException
	if err == nil || !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return err
	}
	for _, m := range models {
		err := send([]mongo.WriteModel{m})
		if mongo.IsDuplicateKeyError(err) {
			err = send([]mongo.WriteModel{m})
		}
		if err != nil && !mongo.IsDuplicateKeyError(err) {
			return err
		}
	}
	return nil
}

// write sends models, idempotent updates of accounts, as unordered
// bulk writes of at most writeBatch statements each, every one retried on
// its own. It returns the indexes of the models that may not have been
// applied and the first error.
//
// A command that fails with write errors is sent again one statement at a
// time, and only the statements that fail then are returned: sending an
// applied statement again changes nothing, and what each statement's own
// answer says is then beyond doubt. Any other failure returns that
// command's statements and all after it, unsent, for the next pass.
func (l *Ledger) write(ctx context.Context, models []mongo.WriteModel) (map[int]bool, error) {
	failed, _, err := l.writeConfirmed(ctx, models, nil)
	return failed, err
}

// writeConfirmed is write, and also returns, of the models confirm names,
// those that may not have matched a document: every one of them in a
// command whose matched count fell short of its statements (each names
// one document by _id, so a command in which all matched matched as many
// as it has), or that was sent again alone and matched nothing; and, in
// place of failing them, those the server refused alone with a write
// error (a single-document statement that did not apply), for the caller
// to send otherwise. A transient error (see transient: a retryable code or
// the RetryableWriteError label, the command's or a statement's) is
// retried with its command; one that persists leaves its statements not
// done or unconfirmed, never refused for good.
func (l *Ledger) writeConfirmed(ctx context.Context, models []mongo.WriteModel, confirm map[int]bool) (map[int]bool, map[int]bool, error) {
	failed := map[int]bool{}
	unconfirmed := map[int]bool{}
	var firstErr error
	send := func(start, end int) error {
		return l.retry(ctx, func(ctx context.Context) error {
			res, err := l.accounts.BulkWrite(ctx, models[start:end], unorderedWrite)
			if err == nil && (res == nil || res.MatchedCount < int64(end-start)) {
				for i := start; i < end; i++ {
					if confirm[i] {
						unconfirmed[i] = true
					}
				}
			}
			return err
		})
	}
	for start := 0; start < len(models); start += l.writeBatch {
		end := min(start+l.writeBatch, len(models))
		err := send(start, end)
		var bwe mongo.BulkWriteException
		switch {
		case err == nil:
			continue
		case errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 && bwe.WriteConcernError == nil:
			// refused is a statement the server refused alone: failed, or,
			// if confirm names it, left for the caller to send otherwise
			// (a refused single-document statement did not apply).
			refused := func(i int, err error) {
				if confirm[i] {
					unconfirmed[i] = true
					return
				}
				failed[i] = true
				firstErr = cmpErr(firstErr, err)
			}
			if end-start == 1 {
				refused(start, err)
				continue
			}
			for i := start; i < end; i++ {
				err := send(i, i+1)
				if err == nil {
					continue
				}
				if errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 && bwe.WriteConcernError == nil {
					refused(i, err)
					continue
				}
				failed[i] = true
				firstErr = cmpErr(firstErr, err)
			}
			continue
		}
		// The server did not answer, or refused the command: this
		// chunk and the rest wait for the next pass.
		for i := start; i < len(models); i++ {
			failed[i] = true
		}
		return failed, unconfirmed, err
	}
	return failed, unconfirmed, firstErr
}
