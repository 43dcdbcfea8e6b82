package twopc

// The log: the transactions collection (and the history archive), every
// guarded write and read of a transaction, and the server's clock. Every
// command on the transactions collection goes through it (c.log), and it
// sends none to an accounts collection.

import "go.mongodb.org/mongo-driver/v2/mongo"

// txnLog is the coordinator's log: the transactions collection, read and
// written at majority, with the configuration (hooks, observers, retries,
// history) its commands obey.
type txnLog struct {
	*config
	txns *mongo.Collection // the transactions collection
}
