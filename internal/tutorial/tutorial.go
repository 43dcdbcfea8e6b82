// Package tutorial is the two-phase commit of MongoDB's tutorial "Perform
// Two Phase Commits", written step for step, for comparison with the
// library in benchmarks only. It is not safe to use: it has the tutorial's
// hazards (no claim, no fences, no balance check, no recovery) on purpose.
//
// A transfer is the tutorial's eight commands, one after another, each
// waiting for the previous one's reply:
//
//  1. insert the transaction {_id, source, destination, value, state:
//     "initial", lastModified: new Date()};
//  2. initial → pending: update {_id, state: "initial"} with $set state and
//     $currentDate lastModified;
//  3. debit the source: update {_id: source, pendingTransactions: {$ne: id}}
//     with {$inc: {balance: -value}, $push: {pendingTransactions: id}};
//  4. credit the destination likewise, with +value;
//  5. pending → applied, as in 2;
//  6. pull the id from the source: update {_id: source,
//     pendingTransactions: id} with $pull;
//  7. pull it from the destination likewise;
//  8. applied → done, as in 2.
//
// The tutorial's step "retrieve the transaction to start" (findOne {state:
// "initial"}) is left out: the caller that inserted the transaction already
// holds it, as every client of the tutorial's pattern does.
package tutorial

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Commands is the number of commands a transfer sends, all on the caller's
// path.
const Commands = 8

// ErrNotModified reports a step whose guarded update matched nothing: in
// the tutorial, the transaction is then left where it stands for a
// recovery process.
var ErrNotModified = errors.New("tutorial: step modified nothing")

// Bank is the tutorial's two collections.
type Bank struct {
	Accounts     *mongo.Collection
	Transactions *mongo.Collection
}

// New returns the tutorial's bank on the "accounts" and "transactions"
// collections of db.
func New(db *mongo.Database) *Bank {
	return &Bank{Accounts: db.Collection("accounts"), Transactions: db.Collection("transactions")}
}

// RecoveryIndexKeys are the keys of the one index the tutorial's recovery
// needs: its query for the transactions to recover, {state: "pending",
// lastModified: {$lt: threshold}} (and "applied"), reads by
// {state: 1, lastModified: 1}. The tutorial makes no index (its recovery
// reads the whole log); a service running it would make this one.
func RecoveryIndexKeys() bson.D {
	return bson.D{{Key: "state", Value: 1}, {Key: "lastModified", Value: 1}}
}

// EnsureRecoveryIndex makes the index of RecoveryIndexKeys on the
// transactions, idempotently.
func (b *Bank) EnsureRecoveryIndex(ctx context.Context) error {
	if _, err := b.Transactions.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: RecoveryIndexKeys()}); err != nil {
		return fmt.Errorf("tutorial: recovery index: %w", err)
	}
	return nil
}

// OpenAccount inserts {_id: id, balance, pendingTransactions: []}.
func (b *Bank) OpenAccount(ctx context.Context, id any, balance int64) error {
	_, err := b.Accounts.InsertOne(ctx, bson.D{
		{Key: "_id", Value: id},
		{Key: "balance", Value: balance},
		{Key: "pendingTransactions", Value: bson.A{}},
	})
	if err != nil {
		return fmt.Errorf("tutorial: open account %v: %w", id, err)
	}
	return nil
}

// Transfer moves value from source to destination with the tutorial's
// eight commands and returns the transaction's id. An error leaves the
// transaction at the step it names.
func (b *Bank) Transfer(ctx context.Context, source, destination any, value int64) (bson.ObjectID, error) {
	id := bson.NewObjectID()
	_, err := b.Transactions.InsertOne(ctx, bson.D{
		{Key: "_id", Value: id},
		{Key: "source", Value: source},
		{Key: "destination", Value: destination},
		{Key: "value", Value: value},
		{Key: "state", Value: "initial"},
		{Key: "lastModified", Value: time.Now()},
	})
	if err != nil {
		return id, fmt.Errorf("tutorial: insert transaction %s: %w", id.Hex(), err)
	}
	steps := []struct {
		name   string
		coll   *mongo.Collection
		filter bson.D
		update bson.D
	}{
		{"initial → pending", b.Transactions, stateFilter(id, "initial"), stateUpdate("pending")},
		{"debit source", b.Accounts,
			bson.D{{Key: "_id", Value: source}, {Key: "pendingTransactions", Value: bson.D{{Key: "$ne", Value: id}}}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: -value}}}, {Key: "$push", Value: bson.D{{Key: "pendingTransactions", Value: id}}}}},
		{"credit destination", b.Accounts,
			bson.D{{Key: "_id", Value: destination}, {Key: "pendingTransactions", Value: bson.D{{Key: "$ne", Value: id}}}},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: value}}}, {Key: "$push", Value: bson.D{{Key: "pendingTransactions", Value: id}}}}},
		{"pending → applied", b.Transactions, stateFilter(id, "pending"), stateUpdate("applied")},
		{"pull from source", b.Accounts,
			bson.D{{Key: "_id", Value: source}, {Key: "pendingTransactions", Value: id}},
			bson.D{{Key: "$pull", Value: bson.D{{Key: "pendingTransactions", Value: id}}}}},
		{"pull from destination", b.Accounts,
			bson.D{{Key: "_id", Value: destination}, {Key: "pendingTransactions", Value: id}},
			bson.D{{Key: "$pull", Value: bson.D{{Key: "pendingTransactions", Value: id}}}}},
		{"applied → done", b.Transactions, stateFilter(id, "applied"), stateUpdate("done")},
	}
	for _, s := range steps {
		res, err := s.coll.UpdateOne(ctx, s.filter, s.update)
		if err != nil {
			return id, fmt.Errorf("tutorial: transaction %s: %s: %w", id.Hex(), s.name, err)
		}
		if res.ModifiedCount != 1 {
			return id, fmt.Errorf("%w: transaction %s: %s", ErrNotModified, id.Hex(), s.name)
		}
	}
	return id, nil
}

func stateFilter(id bson.ObjectID, state string) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "state", Value: state}}
}

func stateUpdate(to string) bson.D {
	return bson.D{
		{Key: "$set", Value: bson.D{{Key: "state", Value: to}}},
		{Key: "$currentDate", Value: bson.D{{Key: "lastModified", Value: true}}},
	}
}
