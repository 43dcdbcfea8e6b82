package twopc

// Assets and limits: the options an account is opened with (its asset,
// its floor and ceiling), SetLimits, and the rules for asset codes (their
// grammar is internal/schema's ValidAsset, which the tool reads them by).

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// AccountOption configures an account: OpenAccount's, or SetLimits'.
type AccountOption func(*accountConfig)

// accountConfig is what AccountOptions set.
type accountConfig struct {
	asset      string
	assetSet   bool
	floor      int64
	floorSet   bool
	ceiling    int64
	ceilingSet bool
	// metadata is AccountMetadata's, for OpenAccount only.
	metadata    map[string]string
	metadataSet bool
}

// AccountAsset gives the account an asset: a code of upper-case letters,
// digits and _, at most 32 bytes, then optionally "/N", the scale amounts
// are shown with (0 to 18): "USD/2" is an amount of cents shown as
// dollars. Codes compare as whole strings ("USD" and "USD/2" are two
// assets). A leg applies only to an account of its asset (see Leg.Asset,
// WithAsset), which the server checks in the write that moves the money;
// an account's asset never changes.
func AccountAsset(code string) AccountOption {
	return func(c *accountConfig) { c.asset, c.assetSet = code, true }
}

// AccountFloor gives the account limits, with min the lowest balance
// allowed: a debit applies only if the balance after it, which already
// counts what holds and transfers in flight have taken, stays at or
// above min (ErrInsufficientFunds otherwise). A negative min is an
// overdraft limit. An account with limits and no AccountFloor has a
// floor of 0; its own floor governs it, whatever WithAllowNegative says.
// min must lie in [-MaxLimit, MaxLimit].
func AccountFloor(min int64) AccountOption {
	return func(c *accountConfig) { c.floor, c.floorSet = min, true }
}

// AccountCeiling gives the account limits, with max the highest balance
// allowed: a credit applies only if the balance, counting every leg in
// flight on the account as if it settled or was undone, stays at or below
// max with it (ErrLimitExceeded otherwise). An undo, or the rest of a
// hold returning, raises the balance and is never refused, which is why
// the legs in flight count. An account with limits and no AccountCeiling
// has a ceiling of MaxLimit. max must lie in [-MaxLimit, MaxLimit] and
// not below the floor.
func AccountCeiling(max int64) AccountOption {
	return func(c *accountConfig) { c.ceiling, c.ceilingSet = max, true }
}

// accountOptions applies opts.
func accountOptions(opts []AccountOption) accountConfig {
	var c accountConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// limited reports whether the options give the account limits.
func (c accountConfig) limited() bool { return c.floorSet || c.ceilingSet }

// assetScale returns the scale of asset code (0 if it has none).
func assetScale(code string) int {
	_, scale, _ := strings.Cut(code, "/")
	n, _ := strconv.Atoi(scale)
	return n
}

// limits are an account's floor and ceiling, as the rooms count them.
type limits struct {
	floor, ceiling int64
	ceilingSet     bool // a ceiling of its own (else MaxLimit)
}

// limitsOf returns the limits opts give, over the current ones cur (an
// account with none: a floor of 0, no ceiling), and why they are not
// valid.
func limitsOf(cfg accountConfig, cur limits) (limits, error) {
	lim := cur
	if cfg.floorSet {
		lim.floor = cfg.floor
	}
	if cfg.ceilingSet {
		lim.ceiling, lim.ceilingSet = cfg.ceiling, true
	}
	if !lim.ceilingSet {
		lim.ceiling = MaxLimit
	}
	switch {
	case lim.floor < -MaxLimit || lim.floor > MaxLimit:
		return lim, errorf("%w: floor %d outside [-MaxLimit, MaxLimit]", ErrInvalidAccount, lim.floor)
	case lim.ceiling < -MaxLimit || lim.ceiling > MaxLimit:
		return lim, errorf("%w: ceiling %d outside [-MaxLimit, MaxLimit]", ErrInvalidAccount, lim.ceiling)
	case lim.ceiling < lim.floor:
		return lim, errorf("%w: ceiling %d below floor %d", ErrInvalidAccount, lim.ceiling, lim.floor)
	}
	return lim, nil
}

// rooms returns an account's rooms under lim for its balance and the
// sums in flight (pendingDebit, pendingCredit), and false if one does
// not fit in int64.
func (lim limits) rooms(balance, debit, credit int64) (floorRoom, ceilingRoom int64, ok bool) {
	top, ok1 := addInt64(balance, debit)
	top, ok2 := addInt64(top, credit)
	floorRoom, ok3 := subInt64(balance, lim.floor)
	ceilingRoom, ok4 := subInt64(lim.ceiling, top)
	return floorRoom, ceilingRoom, ok1 && ok2 && ok3 && ok4
}

func addInt64(a, b int64) (int64, bool) {
	s := a + b
	return s, (b >= 0) == (s >= a)
}

func subInt64(a, b int64) (int64, bool) {
	if b == math.MinInt64 {
		return 0, false
	}
	return addInt64(a, -b)
}

// limitFields is the $set of an account's limit fields: floor, ceiling
// (if its own) and the rooms.
func (lim limits) fields(floorRoom, ceilingRoom int64) bson.D {
	d := bson.D{{Key: fieldFloor, Value: lim.floor}}
	if lim.ceilingSet {
		d = append(d, bson.E{Key: fieldCeiling, Value: lim.ceiling})
	}
	return append(d, bson.E{Key: fieldFloorRoom, Value: floorRoom}, bson.E{Key: fieldCeilingRoom, Value: ceilingRoom})
}

// maxSetLimitsAttempts bounds SetLimits' read-and-write rounds on an
// account that keeps changing between the two.
const maxSetLimitsAttempts = 64

// SetLimits sets the floor and ceiling of account id of ledger ("" is the
// default ledger) to what AccountFloor and AccountCeiling give; a limit
// not given stays as it is (an account without limits takes a floor of 0
// and no ceiling). AccountAsset may be given only with the account's own
// asset (ErrAssetMismatch otherwise): an asset never changes.
//
// It is one guarded write: on an account with limits, an update that
// requires the limits it read, and the count of SetLimits writes it read
// (limitsSeq, which it adds one to, so that one delivered late never
// matches), and moves the rooms by the difference (so it never misses a
// leg written meanwhile); on one without, an update that requires the
// balance and the sums in flight it read and sets the rooms from them.
// While legs move the account between its read and its write, it reads
// and writes again, waiting a little longer each time (1 ms, growing to
// 64 ms), up to 64 times or until ctx ends; then ErrInProgress. On an
// account that moves faster than that, open it with its limits instead.
// Legs written for the account as it was match nothing afterwards and are
// sent again for its kind. It moves no money: a floor raised above the
// balance, or a ceiling lowered below what the balance and its legs in
// flight reach, refuses later debits (or credits) and nothing else. The
// account's limits are kept for good.
//
// It returns ErrAccountNotFound for no account, ErrInvalidAccount (and
// writes nothing) for no AccountFloor or AccountCeiling, limits that are
// not valid, a balance that is not an integer, or one that with its legs
// in flight may leave [-MaxLimit, MaxLimit], and ErrUnknownLedger for a
// ledger the coordinator was not given. It is bounded as a money call is
// (WithCallTimeout), its retries included.
func (c *Coordinator) SetLimits(ctx context.Context, ledger string, id any, opts ...AccountOption) (err error) {
	ctx, b := c.bound(ctx)
	defer func() { err = b.explain(err); b.end() }()
	l, err := c.ledgers.get(ledger)
	if err != nil {
		return errorf("twopc: set limits: %w", err)
	}
	return l.setLimits(ctx, id, accountOptions(opts))
}

// setLimits is SetLimits on l.
func (l *Ledger) setLimits(ctx context.Context, id any, cfg accountConfig) error {
	if err := validateAccountID("account", id); err != nil {
		return errorf("twopc: set limits: %w", err)
	}
	if err := l.shards.need(ctx); err != nil {
		return errorf("twopc: set limits %v: %w", id, err)
	}
	if cfg.assetSet {
		if err := schema.ValidAsset(cfg.asset); err != nil {
			return errorf("twopc: set limits of %v: %w: %w", id, ErrInvalidAccount, err)
		}
	}
	if cfg.metadataSet {
		return errorf("twopc: set limits of %v: %w: an account's metadata is written once, by OpenAccount", id, ErrInvalidAccount)
	}
	backoff := time.Millisecond
	for attempt := 0; attempt < maxSetLimitsAttempts; attempt++ {
		if attempt > 0 {
			// Legs moved the account between the read and the write:
			// wait a little, growing, then read again.
			if err := sleepCtx(ctx, backoff); err != nil {
				return errorf("twopc: set limits of %v: %w", id, err)
			}
			backoff = min(2*backoff, 64*time.Millisecond)
		}
		var a account
		err := l.retry(ctx, func(ctx context.Context) error {
			return l.accounts.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(accountProjection)).Decode(&a)
		})
		if errors.Is(err, mongo.ErrNoDocuments) || (err == nil && a.Tombstone) {
			return errorf("twopc: set limits: %w: %v", ErrAccountNotFound, id)
		}
		if err != nil {
			return errorf("twopc: set limits of %v: %w", id, err)
		}
		l.kinds.saw(&a)
		if asset, ok := a.assetOf(); cfg.assetSet && (!ok || asset != cfg.asset) {
			return errorf("twopc: set limits of %v: %w: it holds %s, not %s", id, ErrAssetMismatch, assetName(a.Asset), cfg.asset)
		}
		if !cfg.limited() {
			return errorf("twopc: set limits of %v: %w: give AccountFloor or AccountCeiling", id, ErrInvalidAccount)
		}
		filter, update, err := limitsWrite(&a, id, cfg)
		if err != nil {
			return errorf("twopc: set limits of %v: %w", id, err)
		}
		var res *mongo.UpdateResult
		err = l.retry(ctx, func(ctx context.Context) error {
			var err error
			res, err = l.accounts.UpdateOne(ctx, filter, update)
			return err
		})
		if err != nil {
			return errorf("twopc: set limits of %v: %w", id, err)
		}
		if res.MatchedCount == 1 {
			l.kinds.limitedNow(id)
			return nil
		}
	}
	return errorf("twopc: set limits of %v: %w: the account kept changing between its read and the write (%d attempts)",
		id, ErrInProgress, maxSetLimitsAttempts)
}

// limitsWrite is SetLimits' guarded update of account a, read just before.
func limitsWrite(a *account, id any, cfg accountConfig) (filter, update bson.D, err error) {
	b, ok := a.balance()
	if !ok {
		return nil, nil, errorf("%w: balance of BSON type %s", ErrInvalidAccount, a.Balance.Type)
	}
	debit, dok := integerOK(a.PendingDebit)
	credit, cok := integerOK(a.PendingCredit)
	switch {
	case (!dok && a.PendingDebit.Type != 0) || (!cok && a.PendingCredit.Type != 0):
		return nil, nil, errorf("%w: pendingDebit of BSON type %s, pendingCredit of BSON type %s", ErrInvalidAccount, a.PendingDebit.Type, a.PendingCredit.Type)
	case b < -MaxLimit || debit < 0 || credit < 0 || b > MaxLimit-debit || b+debit > MaxLimit-credit:
		// What the balance can become, whatever in flight settles or is
		// undone, lies in [b, b+debit+credit]: within [-MaxLimit,
		// MaxLimit], the rooms of any limits fit in int64, now and after.
		return nil, nil, errorf("%w: balance %d with %d in flight out and %d in: limits need it within [-MaxLimit, MaxLimit]",
			ErrInvalidAccount, b, debit, credit)
	}
	if a.limited() {
		cur, ok := a.limits()
		if !ok {
			return nil, nil, errorf("%w: floor or ceiling not an integer", ErrInvalidAccount)
		}
		if _, _, ok := a.rooms(); !ok {
			return nil, nil, errorf("%w: floorRoom of BSON type %s, ceilingRoom of BSON type %s", ErrInvalidAccount, a.FloorRoom.Type, a.CeilingRoom.Type)
		}
		lim, err := limitsOf(cfg, cur)
		if err != nil {
			return nil, nil, err
		}
		// Rooms move by the limits' difference: legs written meanwhile
		// move them too, and $inc adds to whatever they are.
		filter = bson.D{{Key: "_id", Value: id}, {Key: fieldFloorRoom, Value: bson.D{integer}},
			{Key: fieldCeilingRoom, Value: bson.D{integer}}, {Key: fieldFloor, Value: cur.floor}}
		switch seq, ok := integerOK(a.LimitsSeq); {
		case ok:
			filter = append(filter, bson.E{Key: fieldLimitsSeq, Value: seq})
		case a.LimitsSeq.Type == 0:
			filter = append(filter, bson.E{Key: fieldLimitsSeq, Value: bson.D{{Key: "$exists", Value: false}}})
		default:
			return nil, nil, errorf("%w: limitsSeq of BSON type %s", ErrInvalidAccount, a.LimitsSeq.Type)
		}
		if cur.ceilingSet {
			filter = append(filter, bson.E{Key: fieldCeiling, Value: cur.ceiling})
		} else {
			filter = append(filter, bson.E{Key: fieldCeiling, Value: bson.D{{Key: "$exists", Value: false}}})
		}
		set := bson.D{{Key: fieldFloor, Value: lim.floor}}
		if lim.ceilingSet {
			set = append(set, bson.E{Key: fieldCeiling, Value: lim.ceiling})
		}
		update = bson.D{{Key: "$set", Value: set}}
		inc := bson.D{{Key: fieldLimitsSeq, Value: int64(1)}}
		floorRoom, ceilingRoom, _ := a.rooms()
		df, dc := cur.floor-lim.floor, lim.ceiling-cur.ceiling // all in [-MaxLimit, MaxLimit]: no overflow
		if _, ok1 := addInt64(floorRoom, df); !ok1 {
			return nil, nil, errorf("%w: floorRoom %d does not take %+d in int64 (edited by hand?)", ErrInvalidAccount, floorRoom, df)
		}
		if _, ok2 := addInt64(ceilingRoom, dc); !ok2 {
			return nil, nil, errorf("%w: ceilingRoom %d does not take %+d in int64 (edited by hand?)", ErrInvalidAccount, ceilingRoom, dc)
		}
		if df != 0 {
			inc = append(inc, bson.E{Key: fieldFloorRoom, Value: df})
		}
		if dc != 0 {
			inc = append(inc, bson.E{Key: fieldCeilingRoom, Value: dc})
		}
		return filter, append(update, bson.E{Key: "$inc", Value: inc}), nil
	}
	lim, err := limitsOf(cfg, limits{})
	if err != nil {
		return nil, nil, err
	}
	floorRoom, ceilingRoom, _ := lim.rooms(b, debit, credit) // bounded above: they fit
	// The rooms are set from the balance and the sums in flight read:
	// the write requires them unchanged, and no room yet.
	filter = bson.D{{Key: "_id", Value: id}, {Key: fieldFloorRoom, Value: bson.D{{Key: "$exists", Value: false}}}, {Key: fieldBalance, Value: b}}
	for _, f := range []struct {
		name string
		v    bson.RawValue
	}{{fieldPendingDebit, a.PendingDebit}, {fieldPendingCredit, a.PendingCredit}} {
		if n, ok := integerOK(f.v); ok {
			filter = append(filter, bson.E{Key: f.name, Value: n})
		} else if f.v.Type == 0 {
			filter = append(filter, bson.E{Key: f.name, Value: bson.D{{Key: "$exists", Value: false}}})
		} else {
			return nil, nil, errorf("%w: %s of BSON type %s", ErrInvalidAccount, f.name, f.v.Type)
		}
	}
	return filter, bson.D{{Key: "$set", Value: lim.fields(floorRoom, ceilingRoom)}}, nil
}

// limits returns a limited account's floor and ceiling, and false if one
// is not an integer.
func (a *account) limits() (limits, bool) {
	floor, ok := integerOK(a.Floor)
	lim := limits{floor: floor, ceiling: MaxLimit}
	switch a.Ceiling.Type {
	case 0:
	default:
		c, cok := integerOK(a.Ceiling)
		lim.ceiling, lim.ceilingSet, ok = c, true, ok && cok
	}
	return lim, ok
}
