package twopc_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
)

// money is what a leg moves on account document a: its balance (as
// stored, of whatever type), markers and amounts in flight.
func money(a bson.Raw) [4]bson.RawValue {
	return [4]bson.RawValue{a.Lookup("balance"), a.Lookup("pendingTransactions"), a.Lookup("pendingCredit"), a.Lookup("pendingDebit")}
}

// rawAccount is account id as stored.
func (b *bank) rawAccount(id any) bson.Raw {
	b.t.Helper()
	raw, err := b.db.Collection("accounts").FindOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}}).Raw()
	require.NoError(b.t, err)
	return raw
}

// insertByHand inserts accounts as the tutorial does: {_id, balance,
// pendingTransactions: []}, the balance of whatever type is given.
func (b *bank) insertByHand(accounts map[string]any) {
	b.t.Helper()
	for id, bal := range accounts {
		_, err := b.db.Collection("accounts").InsertOne(testCtx(b.t), bson.D{{Key: "_id", Value: id}, {Key: "balance", Value: bal},
			{Key: "pendingTransactions", Value: bson.A{}}})
		require.NoError(b.t, err)
	}
}

// TestAdoptHandInsertedAccounts: accounts inserted by hand as the shell
// writes the tutorial's (balance: 1000 is a double there) are adopted the
// first time a leg meets them: a whole-number double balance becomes a
// long, and the account gets its fences and a date line, which every leg
// write then requires. A fractional balance is refused, nothing written.
func TestAdoptHandInsertedAccounts(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.insertByHand(map[string]any{"A": 1000.0, "B": int32(0), "F": 10.5})

	_, err := b.c.Transfer(ctx, "A", "B", 100)
	require.NoError(t, err)
	for id, want := range map[string]int64{"A": 900, "B": 100} {
		raw := b.rawAccount(id)
		assert.Equalf(t, bson.TypeInt64, raw.Lookup("balance").Type, "%s: a long once adopted", id)
		assert.Equalf(t, want, raw.Lookup("balance").AsInt64(), "%s", id)
		assert.Equalf(t, bson.TypeArray, raw.Lookup("fencedLegs").Type, "%s", id)
		assert.Equalf(t, bson.TypeDateTime, raw.Lookup("fencedBefore").Type, "%s: a date line", id)
	}

	before := b.rawAccount("F")
	_, err = b.c.Transfer(ctx, "F", "B", 1)
	require.ErrorIs(t, err, twopc.ErrInvalidAccount, "a balance that is not a whole number")
	assert.Contains(t, err.Error(), "double")
	after := b.rawAccount("F")
	assert.Equal(t, before.Lookup("balance"), after.Lookup("balance"), "nothing converted")
	assert.Equal(t, bson.TypeDouble, after.Lookup("balance").Type)
	assert.Equal(t, int64(100), b.balance("B"))
}

// TestAdoptWhileTransfersInFlight: transfers created before an account's
// adoption, still in flight, complete after it, each leg once: the line
// adoption sets is at most the low-water mark, below every unfinished
// transaction.
func TestAdoptWhileTransfersInFlight(t *testing.T) {
	s := newStall(twopc.StepApply)
	b := newBank(t, twopc.WithSyncSettle(), twopc.WithStepHook(s.hook))
	ctx := testCtx(t)
	b.open(map[string]int64{"X": 500, "Y": 0})
	b.insertByHand(map[string]any{"H": int64(300)})
	early := stalledTransfer(t, b, s, "X", "H", 50) // created, not yet applied

	other := b.coordinator(twopc.WithSyncSettle())
	_, err := twopc.ReadMark(ctx, other)
	require.NoError(t, err)
	_, err = other.Transfer(ctx, "H", "Y", 20) // adopts H
	require.NoError(t, err)
	assert.Equal(t, bson.TypeDateTime, b.rawAccount("H").Lookup("fencedBefore").Type)

	close(s.release)
	r := <-early
	require.NoError(t, r.err)
	assert.Equal(t, twopc.StateDone, r.txn.State)
	b.checkSettled(map[string]int64{"X": 500, "Y": 0, "H": 300})
	assert.Equal(t, int64(330), b.balance("H"))
}

// TestAdoptedAccountHandEdits: after adoption, a hand edit that breaks the
// fence line (a timestamp, an array holding a date), the fences (a
// string) or the balance's type (a double) makes every leg write on the
// account match nothing: the transfer is refused with ErrInvalidAccount,
// and the account's money is as the edit left it. A leg write of an earlier
// transfer delivered again after the edit matches nothing either.
func TestAdoptedAccountHandEdits(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"S": 1000})
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	far := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, edit := range []struct {
		name  string
		field string
		value any
	}{
		{"line a timestamp", "fencedBefore", bson.Timestamp{T: 1}},
		{"line an array", "fencedBefore", bson.A{time.Unix(0, 0).UTC()}},
		{"line an array of a far date", "fencedBefore", bson.A{far}},
		{"fences a string", "fencedLegs", "x"},
		{"balance a double", "balance", 500.0},
	} {
		t.Run(edit.name, func(t *testing.T) {
			id := "E " + edit.name
			require.NoError(t, b.c.OpenAccount(ctx, id, 500))
			_, err := c.Transfer(ctx, "S", id, 10)
			require.NoError(t, err)
			writes := rec.recorded()
			_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: id}},
				bson.D{{Key: "$set", Value: bson.D{{Key: edit.field, Value: edit.value}}}})
			require.NoError(t, err)
			edited := b.rawAccount(id)
			for _, txn := range []func() error{
				func() error { _, err := b.c.Transfer(ctx, id, "S", 5); return err },
				func() error { _, err := b.c.Transfer(ctx, "S", id, 5); return err },
			} {
				require.ErrorIs(t, txn(), twopc.ErrInvalidAccount)
				assert.Equal(t, money(edited), money(b.rawAccount(id)), "no leg applied, nothing undone")
			}
			resendAll(t, b.db, writes)
			assert.Equal(t, money(edited), money(b.rawAccount(id)), "an earlier transfer's writes again: nothing")
		})
	}
}

// TestAdoptAfterARollbackBeforeAdoption: a transfer that rolls back in the
// round its hand-inserted account (a double balance, as the shell writes
// it) would have been adopted in fences that account without adopting it;
// the rollback's line write does not make it look adopted, so the next
// transfer adopts it (the balance made a long) and applies.
func TestAdoptAfterARollbackBeforeAdoption(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"P": 5, "R": 100})
	b.insertByHand(map[string]any{"H": 1000.0})
	_, err := twopc.ReadMark(ctx, b.c) // so that the rollback sends its line writes
	require.NoError(t, err)
	_, err = b.c.TransferLegs(ctx, []twopc.Leg{{Account: "P", Amount: -50}, {Account: "H", Amount: 50}})
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)

	_, err = b.c.Transfer(ctx, "R", "H", 10)
	require.NoError(t, err, "H is adopted by its next transfer")
	raw := b.rawAccount("H")
	assert.Equal(t, bson.TypeInt64, raw.Lookup("balance").Type)
	assert.Equal(t, int64(1010), raw.Lookup("balance").AsInt64())
}

// TestAdoptionDeliveredAgain: every write of a transfer that adopted its
// accounts (the adoption included) delivered again, once the transfer is
// done and again after later transfers moved the accounts' lines past it:
// nothing changes, and a balance made a long stays one.
func TestAdoptionDeliveredAgain(t *testing.T) {
	b := newBank(t)
	ctx := testCtx(t)
	b.insertByHand(map[string]any{"H": 1000.0, "K": int64(0)})
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	first, err := c.Transfer(ctx, "H", "K", 100)
	require.NoError(t, err)
	writes := rec.recorded()
	states := b.accountStates()
	resendAll(t, b.db, writes)
	assert.Equal(t, states, b.accountStates(), "delivered again once done")

	b.moveLine(first.Created, "H", "K")
	_, err = b.c.Transfer(ctx, "K", "H", 40)
	require.NoError(t, err)
	require.NoError(t, b.c.Settle(ctx))
	states = b.accountStates()
	resendAll(t, b.db, writes)
	assert.Equal(t, states, b.accountStates(), "delivered again past the line")
	assert.Equal(t, bson.TypeInt64, b.rawAccount("H").Lookup("balance").Type)
	assert.Equal(t, int64(940), b.balance("H"))
}

// TestAdoptedAccountLineRemoved: an adopted account whose fence line a
// hand edit set to null or removed (its fences with it, or not) is not
// adopted again (adoption marks what it adopts, adopted: true): a transfer
// on it is refused with ErrInvalidAccount, and an earlier transfer's writes
// delivered again, its adoption's included, move nothing. Adopted again at
// an idle coordinator's older mark, or by its own adoption delivered again,
// the account took a late duplicate of the earlier transfer's credit a
// second time: money from nowhere.
func TestAdoptedAccountLineRemoved(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"S": 1000})
	opening := map[string]int64{"S": 1000}
	// An idle coordinator: its mark, read now, is the one it keeps.
	idle := b.coordinator(twopc.WithSyncSettle(), twopc.WithFrozenMark())
	_, err := twopc.ReadMark(ctx, idle)
	require.NoError(t, err)
	rec := &writeRecorder{}
	c, err := twopc.NewCoordinator(rec.database(b), twopc.WithSyncSettle())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	for _, edit := range []struct {
		name   string
		update bson.D
	}{
		{"line null", bson.D{{Key: "$set", Value: bson.D{{Key: "fencedBefore", Value: nil}}}}},
		{"line removed", bson.D{{Key: "$unset", Value: bson.D{{Key: "fencedBefore", Value: ""}}}}},
		{"line and fences removed", bson.D{{Key: "$unset", Value: bson.D{{Key: "fencedBefore", Value: ""}, {Key: "fencedLegs", Value: ""}}}}},
	} {
		id := "H " + edit.name
		b.insertByHand(map[string]any{id: int64(100)})
		opening[id] = 100
		n := len(rec.recorded())
		first, err := c.Transfer(ctx, "S", id, 10) // adopts id
		require.NoError(t, err)
		writes := rec.recorded()[n:]
		// Later writes moved the line past the transfer, dropping its fence.
		b.moveLine(first.Created, id)
		_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, edit.update)
		require.NoError(t, err)
		edited := b.rawAccount(id)

		resendAll(t, b.db, writes)
		assert.Equalf(t, money(edited), money(b.rawAccount(id)), "%s: the transfer's writes again, its adoption's included: nothing", id)
		_, err = idle.Transfer(ctx, "S", id, 5)
		assert.ErrorIsf(t, err, twopc.ErrInvalidAccount, "%s: not adopted again", id)
		resendAll(t, b.db, writes)
		assert.Equalf(t, money(edited), money(b.rawAccount(id)), "%s: nothing moved", id)
	}
	b.checkSettled(opening) // no credit applied twice
}

// TestAdoptFencedBeforeFirstLeg: an account a rollback fenced before any
// leg adopted it (fences, no line, not marked adopted) is adopted by its
// first leg, which applies: a hand-inserted account fenced by a transfer
// that rolled back, and a tombstone OpenAccount opened. Adoption and
// OpenAccount mark the account adopted.
func TestAdoptFencedBeforeFirstLeg(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	b.open(map[string]int64{"P": 5, "R": 100})
	b.insertByHand(map[string]any{"H": int64(1000)})
	b.seenThenDeleted(b.c, "ghost")
	_, err := b.c.TransferLegs(ctx, []twopc.Leg{{Account: "P", Amount: -50}, {Account: "H", Amount: 50}})
	require.ErrorIs(t, err, twopc.ErrInsufficientFunds)
	_, err = b.c.Transfer(ctx, "R", "ghost", 10)
	require.ErrorIs(t, err, twopc.ErrAccountNotFound)
	for _, id := range []string{"H", "ghost"} {
		raw := b.rawAccount(id)
		fences, _ := raw.Lookup("fencedLegs").ArrayOK()
		values, _ := fences.Values()
		assert.Lenf(t, values, 1, "%s: fenced by the rollback", id)
		assert.Equalf(t, bson.Type(0), raw.Lookup("adopted").Type, "%s: not adopted", id)
	}
	assert.Equal(t, bson.Type(0), b.rawAccount("H").Lookup("fencedBefore").Type, "H: no line")

	require.NoError(t, b.c.OpenAccount(ctx, "ghost", 0))
	_, err = b.c.Transfer(ctx, "R", "H", 10)
	require.NoError(t, err, "H is adopted by its first leg")
	_, err = b.c.Transfer(ctx, "R", "ghost", 20)
	require.NoError(t, err)
	for _, id := range []string{"H", "ghost", "R"} {
		raw := b.rawAccount(id)
		adopted, ok := raw.Lookup("adopted").BooleanOK()
		assert.Truef(t, ok && adopted, "%s: marked adopted", id)
		assert.Equalf(t, bson.TypeDateTime, raw.Lookup("fencedBefore").Type, "%s: a date line", id)
	}
	b.checkSettled(map[string]int64{"P": 5, "R": 100, "H": 1000, "ghost": 0})
	assert.Equal(t, []int64{1010, 20, 70}, []int64{b.balance("H"), b.balance("ghost"), b.balance("R")})
}

// TestAdoptedAccountHandEditsCapture: a hold's account whose balance a
// hand edit made a double after the hold applied takes no capture's leg,
// as it takes no other leg: the capture is refused with
// ErrInvalidAccount, nothing moves on either account, and the hold stays
// held. The capture's apply used to require no integer balance, and the
// capture settled on the double.
func TestAdoptedAccountHandEditsCapture(t *testing.T) {
	b := newBank(t, twopc.WithSyncSettle())
	ctx := testCtx(t)
	for _, side := range []string{"payer", "payee"} {
		payer, payee := "payer of "+side, "payee of "+side
		b.open(map[string]int64{payer: 1000, payee: 0})
		hold, err := b.c.Hold(ctx, payer, payee, 100)
		require.NoError(t, err)
		edited := side + " of " + side
		bal := float64(b.balance(edited))
		_, err = b.db.Collection("accounts").UpdateOne(ctx, bson.D{{Key: "_id", Value: edited}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "balance", Value: bal}}}})
		require.NoError(t, err)
		before := map[string][4]bson.RawValue{payer: money(b.rawAccount(payer)), payee: money(b.rawAccount(payee))}

		_, err = b.c.Capture(ctx, hold.ID, 50, twopc.WithFinalCapture(false))
		assert.ErrorIsf(t, err, twopc.ErrInvalidAccount, "%s's balance a double", side)
		for id, want := range before {
			assert.Equalf(t, want, money(b.rawAccount(id)), "%s: nothing moved", id)
		}
		assert.Equalf(t, twopc.StateHeld, b.txn(hold.ID).State, "%s: still held", side)
	}
}
