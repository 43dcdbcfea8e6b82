// Package native is a transfer done with MongoDB's own multi-document
// transactions (session.WithTransaction), for comparison with the library
// in benchmarks and reliability runs only: the same accounts collection and
// the same transfers, so that users can choose with numbers.
//
// A transfer is one transaction: a guarded debit of the source ({_id,
// balance: {$gte: value}}, $inc), a credit of the destination, and an
// insert of the transfer in the transactions collection (state "done"), so
// that the checker the library's runs use finds every done transfer and
// its legs. Transactions need a replica set or a sharded cluster; on a
// standalone mongod or a server without them (the dev server) Supported
// says so and Transfer returns ErrNoTransactions having written nothing.
package native

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readconcern"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

var (
	// ErrNoTransactions reports a server without multi-document
	// transactions: a standalone mongod, or a MongoDB-compatible server
	// that has none.
	ErrNoTransactions = errors.New("native: the server has no multi-document transactions (it needs a replica set or a sharded cluster)")
	// ErrInsufficientFunds reports a source whose balance is below the
	// value; the transaction is aborted and nothing is written.
	ErrInsufficientFunds = errors.New("native: insufficient funds")
	// ErrAccountNotFound reports a destination that does not exist.
	ErrAccountNotFound = errors.New("native: account not found")
)

// Supported reports whether db's server runs multi-document transactions:
// hello names a replica set (setName) or a mongos (msg "isdbgrid"), and
// its wire version is at least 7 (MongoDB 4.0).
func Supported(ctx context.Context, db *mongo.Database) (bool, error) {
	var hello struct {
		SetName        string `bson:"setName"`
		Msg            string `bson:"msg"`
		MaxWireVersion int32  `bson:"maxWireVersion"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return false, fmt.Errorf("native: hello: %w", err)
	}
	return (hello.SetName != "" || hello.Msg == "isdbgrid") && hello.MaxWireVersion >= 7, nil
}

// Bank is the accounts and transactions collections of one database.
type Bank struct {
	db           *mongo.Database
	accounts     *mongo.Collection
	transactions *mongo.Collection
	supported    bool
}

// New returns the bank on db's "accounts" and "transactions" collections,
// having asked the server whether it has transactions.
func New(ctx context.Context, db *mongo.Database) (*Bank, error) {
	ok, err := Supported(ctx, db)
	if err != nil {
		return nil, err
	}
	return &Bank{db: db, accounts: db.Collection("accounts"), transactions: db.Collection("transactions"), supported: ok}, nil
}

// Supported reports what New found.
func (b *Bank) Supported() bool { return b.supported }

// Transfer moves value from source to destination in one multi-document
// transaction, with majority read and write concern, retried by the driver
// on transient errors. It returns the transfer's id.
func (b *Bank) Transfer(ctx context.Context, source, destination string, value int64) (bson.ObjectID, error) {
	if !b.supported {
		return bson.ObjectID{}, ErrNoTransactions
	}
	if value <= 0 || source == destination {
		return bson.ObjectID{}, fmt.Errorf("native: bad transfer %q → %q of %d", source, destination, value)
	}
	sess, err := b.db.Client().StartSession()
	if err != nil {
		return bson.ObjectID{}, fmt.Errorf("native: start session: %w", err)
	}
	defer sess.EndSession(context.Background())
	id := bson.NewObjectID()
	txnOpts := options.Transaction().SetReadConcern(readconcern.Snapshot()).SetWriteConcern(writeconcern.Majority())
	_, err = sess.WithTransaction(ctx, func(ctx context.Context) (any, error) {
		res, err := b.accounts.UpdateOne(ctx,
			bson.D{{Key: "_id", Value: source}, {Key: "balance", Value: bson.D{{Key: "$gte", Value: value}}}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: -value}}}})
		if err != nil {
			return nil, err
		}
		if res.MatchedCount == 0 {
			return nil, fmt.Errorf("%w: %s", ErrInsufficientFunds, source)
		}
		res, err = b.accounts.UpdateOne(ctx, bson.D{{Key: "_id", Value: destination}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: value}}}})
		if err != nil {
			return nil, err
		}
		if res.MatchedCount == 0 {
			return nil, fmt.Errorf("%w: %s", ErrAccountNotFound, destination)
		}
		_, err = b.transactions.InsertOne(ctx, bson.D{
			{Key: "_id", Value: id}, {Key: "source", Value: source}, {Key: "destination", Value: destination},
			{Key: "value", Value: value}, {Key: "state", Value: "done"}, {Key: "lastModified", Value: time.Now()},
		})
		return nil, err
	}, txnOpts)
	if err != nil {
		return bson.ObjectID{}, err
	}
	return id, nil
}
