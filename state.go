package twopc

import (
	"context"
	"errors"
	"time"

	"github.com/twopc/twopc/internal/schema"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// State is a transaction's state, stored as the tutorial's strings.
//
//	initial ──► pending ──► applied ──► done
//	   │           │  │        ▲
//	   │           │  └► held ─┘ (Capture)
//	   │           │      │ (Void, expiry)
//	   └─────┬─────┘      │
//	         ▼            │
//	     canceling ◄──────┘
//	         │
//	         ▼
//	     canceled
//
// pending means legs may be applied; applied is the commit point (every
// leg applied, the transfer will end done whatever fails); done means every
// account is settled. canceling means the legs are being undone; canceled
// means none remains. The coordinator inserts transactions already pending
// and claimed; initial is only met in documents written or edited by other
// programs.
// held is a hold's (see Coordinator.Hold): every leg applied and the
// decision handed to the caller; Capture moves it to applied, Void or its
// expiry to canceling, whichever writes first.
type State string

// The seven states.
const (
	StateInitial   State = "initial"
	StatePending   State = "pending"
	StateApplied   State = "applied"
	StateDone      State = "done"
	StateCanceling State = "canceling"
	StateCanceled  State = "canceled"
	// StateHeld: a hold whose legs all applied, awaiting Capture, Void or
	// its expiry (see Coordinator.Hold). It is not past the commit point.
	StateHeld State = "held"
)

// String returns the state's name.
func (s State) String() string { return string(s) }

// Valid reports whether s is one of the seven states.
func (s State) Valid() bool {
	switch s {
	case StateInitial, StatePending, StateApplied, StateDone, StateCanceling, StateCanceled, StateHeld:
		return true
	}
	return false
}

// Final reports whether s is done or canceled: nothing will change the
// transaction's legs again.
func (s State) Final() bool { return s == StateDone || s == StateCanceled }

// Committed reports whether s is past the commit point: the transfer
// happened, whatever fails from here on.
func (s State) Committed() bool { return s == StateApplied || s == StateDone }

// transitions lists the moves the protocol makes.
var transitions = map[State][]State{
	StateInitial:   {StateInitial, StatePending, StateCanceling},            // initial→initial takes over a claim
	StatePending:   {StatePending, StateApplied, StateCanceling, StateHeld}, // pending→pending renews or takes over a claim
	StateHeld:      {StateApplied, StateCanceling},                          // Capture; Void or expiry
	StateApplied:   {StateDone},
	StateCanceling: {StateCanceling, StateCanceled},
}

func canMove(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Field names of transaction documents.
const (
	fieldState         = schema.State
	fieldLastModified  = schema.LastModified
	fieldApplication   = schema.Application
	fieldClaim         = schema.Claim
	fieldKey           = schema.Key
	fieldReason        = schema.Reason
	fieldMetadata      = schema.Metadata
	fieldCommittedAt   = schema.CommittedAt
	fieldEntryKeys     = schema.EntryKeys
	fieldLease         = schema.Lease
	fieldTakeover      = schema.Takeover
	fieldKeep          = schema.Keep
	fieldArchive       = schema.Archive
	fieldCreated       = schema.Created
	fieldAllowNegative = schema.AllowNegative
	fieldPlaceholder   = schema.Placeholder
	fieldLegs          = schema.Legs
	fieldHold          = schema.Hold
	fieldExpiryMs      = schema.ExpiryMs
	fieldCaptured      = schema.Captured
	fieldReleased      = schema.Released
	fieldCapturedLegs  = "capturedLegs"
	fieldCaptures      = "captures"
	fieldCapturesSeq   = "capturesSeq"
	fieldFinalCapture  = "finalCapture"
	fieldCaptureOf     = "captureOf"
	fieldHoldLegs      = "holdLegs"
	fieldVoidMetadata  = "voidMetadata"
	fieldVoidKey       = "voidKey"
	fieldHeldAt        = schema.HeldAt
	fieldOnAccounts    = schema.OnAccounts
	fieldRefundOf      = schema.RefundOf
	fieldEventAt       = schema.EventAt
)

// record is a transaction document as stored: the public Txn plus what the
// protocol keeps to itself.
type record struct {
	Txn `bson:",inline"`
	// Claim is the token of the transaction's current owner.
	Claim bson.ObjectID `bson:"claim,omitempty"`
	// guessed says LastModified is not the stored value but the time the
	// write that set it was sent: a grouped write returns no documents.
	// Not stored.
	guessed bool
	// unnamed marks, by leg, the legs whose asset the caller did not name
	// (see fitAssets): a repeat's such leg matches its key's transaction
	// whatever asset that one took. Not stored.
	unnamed []bool
	// CommittedAt is the commit point (pending → applied, or a hold's
	// capture), stamped by the log server's clock in the commit write
	// ($currentDate): the time a statement orders the transfer's entries
	// by. Zero before it committed.
	CommittedAt time.Time `bson:"committedAt,omitempty"`
	// EventAt is when the transaction last moved to held, applied or
	// canceled, stamped by the log server's clock in that move
	// ($currentDate, beside lastModified): a change feed numbers the
	// transactions whose EventAt is at or after its since. Zero for a
	// transaction that never made such a move (a placeholder).
	EventAt time.Time `bson:"eventAt,omitempty"`
	// LeaseMs is the longest StaleAfter of any process that claimed the
	// transaction: takeover and Cancel judge staleness by it, so a process
	// configured with a short StaleAfter cannot take a transaction another
	// process still holds by its own rules.
	LeaseMs int64 `bson:"leaseMs,omitempty"`
	// TakeoverMs is the takeover lease of the transaction's current owner
	// (WithTakeoverAfter): a repeat of its call with the key, in another
	// process, takes it over once it is untouched for that long.
	TakeoverMs int64 `bson:"takeoverMs,omitempty"`
	// KeepMs is how long the transaction is kept once final
	// (WithHistory), written with it; 0: for good.
	KeepMs int64 `bson:"keepMs,omitempty"`
	// Archive names the collection it is moved to then; "": removed.
	Archive string `bson:"archive,omitempty"`
	// AllowNegative is the transfer's overdraft policy, written with it:
	// whoever applies its legs obeys it, not its own configuration.
	AllowNegative bool `bson:"allowNegative,omitempty"`
	// Placeholder marks a canceled transaction that Cancel wrote for an id
	// no transaction had, so that an insert of that id arriving later
	// cannot become a transfer.
	Placeholder bool `bson:"placeholder,omitempty"`
	// Captures is a hold's book: the captures reserved on it, made or in
	// flight (see capture.go); CapturesSeq counts every change of it, and
	// FinalCapture names the capture that ends it, once one is reserved.
	Captures     []captureEntry `bson:"captures,omitempty"`
	CapturesSeq  int64          `bson:"capturesSeq,omitempty"`
	FinalCapture bson.ObjectID  `bson:"finalCapture,omitempty"`
	// HoldLegs is, for a capture, the leg of the hold each of its legs
	// takes from.
	HoldLegs []int `bson:"holdLegs,omitempty"`
}

// lease is the longer of own and the lease recorded in the transaction.
func (r *record) lease(own time.Duration) time.Duration {
	return max(own, time.Duration(r.LeaseMs)*time.Millisecond)
}

// foreign reports whether r was not written by this library (the
// tutorial's protocol, another program, an older version): it has no
// transaction time. Recovery and Cancel leave such documents alone.
func (r *record) foreign() bool { return r.Created.IsZero() }

// check refuses a document the protocol could not have written.
func (r *record) check() error {
	if !r.State.Valid() {
		return errorf("%w: transaction %s is %q", ErrUnknownState, r.ID.Hex(), r.State)
	}
	if r.Placeholder {
		if r.State != StateCanceled {
			return errorf("%w: placeholder %s is %s", ErrMalformedTxn, r.ID.Hex(), r.State)
		}
		return nil
	}
	if len(r.Legs) > 0 {
		credited, err := validateLegs(r.Legs)
		if err == nil && (r.Source != nil || r.Destination != nil || r.Value != credited) {
			err = errorf("legs %v with source %v, destination %v, value %d", r.Legs, r.Source, r.Destination, r.Value)
		}
		if err != nil {
			return errorf("%w: transaction %s: %v", ErrMalformedTxn, r.ID.Hex(), err)
		}
	} else if err := validateTransfer(r.Source, r.Destination, r.Value); err != nil {
		return errorf("%w: transaction %s: %v", ErrMalformedTxn, r.ID.Hex(), err)
	}
	if r.Captured != 0 && (!r.Hold || r.Captured < 0 || r.Captured > r.Value) {
		return errorf("%w: transaction %s: captured %d of a %s of value %d",
			ErrMalformedTxn, r.ID.Hex(), r.Captured, map[bool]string{true: "hold", false: "transfer"}[r.Hold], r.Value)
	}
	if r.Released != 0 && (!r.Hold || r.Released < 0 || r.Released > r.Value-r.Captured) {
		return errorf("%w: transaction %s: released %d of a %s of value %d that captured %d",
			ErrMalformedTxn, r.ID.Hex(), r.Released, map[bool]string{true: "hold", false: "transfer"}[r.Hold], r.Value, r.Captured)
	}
	if !r.CaptureOf.IsZero() && len(r.HoldLegs) != len(r.AllLegs()) {
		return errorf("%w: transaction %s: a capture of %d legs names %d of the hold's", ErrMalformedTxn, r.ID.Hex(), len(r.AllLegs()), len(r.HoldLegs))
	}
	if !r.foreign() && schema.Marker(r.ID, 0) != r.ID {
		return errorf("%w: transaction %s: not an id this library makes (its last byte is not zero)", ErrMalformedTxn, r.ID.Hex())
	}
	return nil
}

// move is one guarded state transition: the document moves from From to To
// only if it is still in From and, when Claim is set, still claimed with
// Claim (and, when LastModified is set, untouched since then). This is the
// one state guard the coordinator, the canceler and the recoverer share: no
// process that has lost its claim, stalled past a takeover, or read an old
// copy can move a transaction.
type move struct {
	step         Step
	from, to     State
	claim        bson.ObjectID // the claim the mover must hold; zero: none needed
	lastModified time.Time     // the lastModified the mover read; zero: not checked
	heldAt       time.Time     // the heldAt the mover read (an expiry); zero: not checked
	stampHeldAt  bool          // set heldAt from the server's clock too (pending → held)
	anyClaim     bool          // match whatever claim the document has (claim ignored)
	set          bson.D        // extra fields to set
	newClaim     bson.ObjectID // a claim to take; zero: keep the current one
	application  string        // the application taking the claim, with newClaim
	lease        time.Duration // recorded in the transaction if longer than its lease
	takeover     time.Duration // with newClaim: the taker's takeover lease, recorded
	book         bool          // guarded by the hold's capturesSeq as read: seq
	seq          int64
}

// filter is the guard of m for transaction id.
func (m move) filter(id bson.ObjectID) bson.D {
	f := bson.D{{Key: "_id", Value: id}, {Key: fieldState, Value: m.from}}
	if !m.anyClaim {
		if m.claim.IsZero() {
			f = append(f, bson.E{Key: fieldClaim, Value: nil})
		} else {
			f = append(f, bson.E{Key: fieldClaim, Value: m.claim})
		}
	}
	if !m.lastModified.IsZero() {
		f = append(f, bson.E{Key: fieldLastModified, Value: m.lastModified})
	}
	if !m.heldAt.IsZero() {
		f = append(f, bson.E{Key: fieldHeldAt, Value: m.heldAt})
	}
	if m.book {
		f = append(f, seqCond(m.seq))
	}
	return f
}

// update is the write of m: the new state, the extra fields, a new claim if
// taken, and lastModified from the server's clock (committedAt too on a
// commit, and eventAt on a move that gives the transaction an event).
func (m move) update() bson.D {
	set := bson.D{{Key: fieldState, Value: m.to}}
	if !m.newClaim.IsZero() {
		set = append(set, bson.E{Key: fieldClaim, Value: m.newClaim}, bson.E{Key: fieldApplication, Value: m.application})
		if m.takeover > 0 {
			set = append(set, bson.E{Key: fieldTakeover, Value: m.takeover.Milliseconds()})
		}
	}
	set = append(set, m.set...)
	stamps := bson.D{{Key: fieldLastModified, Value: true}}
	if m.to == StateApplied {
		stamps = append(stamps, bson.E{Key: fieldCommittedAt, Value: true})
	}
	if m.to != m.from && (m.to == StateHeld || m.to == StateApplied || m.to == StateCanceled) {
		// The moves that give a transaction an event: a feed's
		// membership, by the server's clock (see Feed).
		stamps = append(stamps, bson.E{Key: fieldEventAt, Value: true})
	}
	if m.stampHeldAt {
		stamps = append(stamps, bson.E{Key: fieldHeldAt, Value: true})
	}
	u := bson.D{
		{Key: "$set", Value: set},
		{Key: "$currentDate", Value: stamps},
	}
	if m.lease > 0 {
		u = append(u, bson.E{Key: "$max", Value: bson.D{{Key: fieldLease, Value: m.lease.Milliseconds()}}})
	}
	return u
}

// advance makes the guarded transition m on r. It returns the transaction
// as it now stands and whether this call (or an earlier attempt of it whose
// reply was lost) made the move. After an ambiguous failure it re-reads the
// document rather than assume: the move happened if the document is in To
// under the claim the move leaves. A write whose reply ctx's end cut off
// (ctx ended after the move began, and the write may have been sent) is
// read back on a context of its own (see readAfter): a move the log holds
// made is reported made, with no error, and a document another process
// moved is reported as it stands; one still where r was gets the write's
// error. The observers are told of every move it tries (see Observer).
func (g *txnLog) advance(ctx context.Context, r *record, m move) (*record, bool, error) {
	return g.advanceHooked(ctx, r, m, false)
}

// advanceHooked is advance for a caller that has already called the step
// hook for the first attempt (hooked); retries call it again.
func (g *txnLog) advanceHooked(ctx context.Context, r *record, m move, hooked bool) (*record, bool, error) {
	if !canMove(m.from, m.to) {
		return r, false, errorf("twopc: no move from %s to %s", m.from, m.to)
	}
	holder := m.claim
	if !m.newClaim.IsZero() {
		holder = m.newClaim
	}
	var now record
	start := time.Now()
	endedBefore := ctx.Err() != nil // then nothing is sent
	err := g.retry(ctx, func(ctx context.Context) error {
		if !hooked {
			if err := g.at(ctx, m.step, r); err != nil {
				return err
			}
		}
		hooked = false
		err := decodeReply(g.txns.FindOneAndUpdate(ctx, encoded(m.filter(r.ID)), encoded(m.update()), returnAfter), &now)
		if errors.Is(err, mongo.ErrNoDocuments) {
			now = record{}
			return nil
		}
		return err
	})
	var stepErr *StepError // a step hook's stop: as if the process died there
	cutOff := err != nil && !endedBefore && ctx.Err() != nil && !unsent(err) && !errors.As(err, &stepErr)
	if err != nil && !cutOff {
		g.transition(ctx, r.ID, m, start, 1, false, err)
		return r, false, err
	}
	if cutOff || now.ID.IsZero() {
		// Not moved by this attempt, or its reply cut off by ctx's end:
		// re-read to learn what happened.
		cur, rerr := g.readBack(ctx, r.ID)
		if rerr != nil {
			err = cmpErr(err, rerr)
			g.transition(ctx, r.ID, m, start, 1, false, err)
			return r, false, err
		}
		// A move that takes a new claim was made by this call only if the
		// document holds that claim: another caller's move to the same
		// state (a capture for another amount, an expiry racing a void)
		// is not this one's.
		moved := cur.State == m.to && ((m.anyClaim && m.newClaim.IsZero()) || cur.Claim == holder)
		if cutOff && !moved && cur.State == m.from {
			// Still where it was: the write did not apply (yet).
			g.transition(ctx, r.ID, m, start, 1, false, err)
			return cur, false, err
		}
		g.transition(ctx, r.ID, m, start, 1, moved, nil)
		return cur, moved, nil
	}
	g.transition(ctx, r.ID, m, start, 1, true, nil)
	return &now, true, nil
}

// read loads transaction id; ErrTxnNotFound if there is none.
func (g *txnLog) read(ctx context.Context, id bson.ObjectID) (*record, error) {
	var r record
	err := g.try(ctx, StepRead, &record{Txn: Txn{ID: id}}, func(ctx context.Context) error {
		return g.txns.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&r)
	})
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, errorf("%w: %s", ErrTxnNotFound, id.Hex())
	}
	if err != nil {
		return nil, err
	}
	return &r, r.check()
}

// finish moves recs, whose step hooks were already called, with the
// claim-free move m: an unordered bulk of single-document updates, one per
// transaction by _id, each with m's guard (for a move to done, even of one
// transaction: a settle needs no document back), or one find-and-modify
// for a single transaction moved to canceled, whose caller gets the stored
// document back.
// It returns the transactions now in m's state and the bulk's error; a
// transaction whose statement failed (its own write error, or the whole
// command's failure) is left out, to be finished again.
//
// The observers are told of each transaction's move. A single one that
// does not match was finished by someone else (or by an attempt whose
// reply was lost): not moved. In a bulk, each statement that did not fail
// is reported moved: it moved, or someone else had (its guard names the
// state it leaves).
func (g *txnLog) finish(ctx context.Context, recs []*record, m move) ([]*record, error) {
	start := time.Now()
	switch {
	case len(recs) == 0:
		return nil, nil
	case len(recs) == 1 && m.to != StateDone:
		// Canceled alone: its caller gets the stored document. A move to
		// done alone goes as a batch's does, one statement by _id: an
		// update costs the server less than a find-and-modify, and a
		// settle needs no document back.
		var cur record
		err := g.retry(ctx, func(ctx context.Context) error {
			return decodeReply(g.txns.FindOneAndUpdate(ctx, encoded(m.filter(recs[0].ID)), encoded(m.update()), returnAfter), &cur)
		})
		if errors.Is(err, mongo.ErrNoDocuments) {
			// Finished already: by someone else, or by an attempt whose
			// reply was lost. Re-read to say which state it is in.
			now, err := g.read(ctx, recs[0].ID)
			g.transition(ctx, recs[0].ID, m, start, 1, false, nil)
			if err != nil || now.State != m.to {
				return nil, err
			}
			return []*record{now}, nil
		}
		g.transition(ctx, recs[0].ID, m, start, 1, err == nil, err)
		if err != nil {
			return nil, err
		}
		return []*record{&cur}, nil
	}
	models := make([]mongo.WriteModel, len(recs))
	for i, r := range recs {
		models[i] = updateByID(m.filter(r.ID), m.update())
	}
	_, failed := g.bulkByID(ctx, models)
	var out []*record
	var err error
	for i, r := range recs {
		g.transition(ctx, r.ID, m, start, len(recs), failed[i] == nil, failed[i])
		if failed[i] != nil {
			err = cmpErr(err, failed[i])
			continue
		}
		cp := *r
		cp.State = m.to
		out = append(out, &cp)
	}
	return out, err
}

func (r *record) txn() *Txn {
	if r == nil {
		return nil
	}
	t := r.Txn
	return &t
}
