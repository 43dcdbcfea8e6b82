package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/internal/mongotest"
)

// fuzzID makes an account id of one of several BSON types from fuzz input.
func fuzzID(kind uint8, s string) any {
	switch kind % 5 {
	case 0:
		return s
	case 1:
		var n int64
		for _, c := range []byte(s) {
			n = n*31 + int64(c)
		}
		return n
	case 2:
		var oid bson.ObjectID
		copy(oid[:], s)
		return oid
	case 3:
		return bson.D{{Key: s, Value: 1}}
	default:
		return nil
	}
}

// FuzzTransfer throws arbitrary ids, values and opening balances at
// Transfer. Bad input must give ErrInvalidTransfer and write nothing;
// anything else must end done with the value moved or canceled with a
// leg's error and nothing moved; never a panic.
func FuzzTransfer(f *testing.F) {
	f.Add(uint8(0), "A", uint8(0), "B", int64(10), int64(100), int64(0))
	f.Add(uint8(0), "A", uint8(0), "A", int64(10), int64(100), int64(0))
	f.Add(uint8(1), "x", uint8(2), "y", int64(math.MaxInt64), int64(math.MaxInt64), int64(0))
	f.Add(uint8(0), "A", uint8(0), "B", int64(1), int64(0), int64(math.MaxInt64))
	f.Add(uint8(3), "$gt", uint8(0), "B", int64(1), int64(5), int64(5))
	f.Add(uint8(4), "", uint8(0), "B", int64(-1), int64(5), int64(5))
	db := mongotest.Connect(f).Database(mongotest.DatabaseName(f))
	f.Fuzz(func(t *testing.T, srcKind uint8, srcS string, dstKind uint8, dstS string, value, srcBal, dstBal int64) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// The collections of this worker process, emptied for each
		// input (inputs of one process run one after another): dropping
		// them would make every input's coordinator build its indexes
		// again, the most of an input's time on the dev server.
		accounts, transactions := fmt.Sprintf("a%d", os.Getpid()), fmt.Sprintf("t%d", os.Getpid())
		for _, coll := range []string{accounts, transactions, transactions + "_checkpoints"} {
			_, err := db.Collection(coll).DeleteMany(ctx, bson.D{})
			require.NoError(t, err)
		}
		c, err := twopc.NewCoordinator(db, twopc.WithCollections(accounts, transactions), twopc.WithSyncSettle())
		require.NoError(t, err)
		defer c.Close(ctx)
		src, dst := fuzzID(srcKind, srcS), fuzzID(dstKind, dstS)

		// Open the accounts the ids can name; an id that cannot be one is
		// refused by OpenAccount as by Transfer.
		// A balance below zero OpenAccount refuses (ErrNegativeBalance,
		// nothing written) is written by hand, as an account another
		// program keeps (or one WithAllowNegative overdrew) would be, so
		// that negative balances still meet Transfer.
		open := func(id any, balance int64) error {
			err := c.OpenAccount(ctx, id, balance)
			if errors.Is(err, twopc.ErrNegativeBalance) {
				_, err = db.Collection(accounts).InsertOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "balance", Value: balance}, {Key: "pendingTransactions", Value: bson.A{}}})
			}
			return err
		}
		openErr := open(src, srcBal)
		dupErr := open(dst, dstBal)
		var txn *twopc.Txn
		require.NotPanics(t, func() { txn, err = c.Transfer(ctx, src, dst, value) })
		count, cerr := db.Collection(transactions).CountDocuments(ctx, bson.D{})
		require.NoError(t, cerr)
		if errors.Is(err, twopc.ErrInvalidTransfer) {
			require.Nil(t, txn)
			require.Zero(t, count, "bad input wrote a transaction")
			return
		}
		require.NoError(t, openErr, "Transfer took an id OpenAccount refused")
		require.Equal(t, int64(1), count)
		srcAfter, err2 := c.Balance(ctx, src)
		require.NoError(t, err2)
		_ = dupErr
		dstAfter, err3 := c.Balance(ctx, dst)
		require.NoError(t, err3)
		switch {
		case err == nil:
			require.Equal(t, twopc.StateDone, txn.State)
			require.Equal(t, srcBal-value, srcAfter)
			require.Equal(t, dstBal+value, dstAfter)
		case errors.Is(err, twopc.ErrInsufficientFunds), errors.Is(err, twopc.ErrBalanceOverflow):
			require.Equal(t, twopc.StateCanceled, txn.State)
			require.Equal(t, srcBal, srcAfter)
			require.Equal(t, dstBal, dstAfter)
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}
