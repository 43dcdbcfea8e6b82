package main

import (
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The collections document writes are counted by: the accounts, the
// transactions (the log), and every other collection together.
const (
	collAccounts     = "accounts"
	collTransactions = "transactions"
	collOthers       = "others"
)

// writeClass returns the class of collection coll a write is counted in.
func writeClass(coll string) string {
	switch coll {
	case collAccounts, collTransactions:
		return coll
	}
	return collOthers
}

// written returns the documents a write command's reply says it wrote:
// an insert's and a delete's n, an update's nModified plus its upserts, a
// findAndModify's lastErrorObject.n. A statement that matched nothing
// wrote nothing; reads write nothing.
func written(command string, reply bson.Raw) int64 {
	num := func(v bson.RawValue) int64 {
		n, _ := v.AsInt64OK()
		return n
	}
	switch command {
	case "insert", "delete":
		return num(reply.Lookup("n"))
	case "update":
		n := num(reply.Lookup("nModified"))
		if arr, ok := reply.Lookup("upserted").ArrayOK(); ok {
			if vals, err := arr.Values(); err == nil {
				n += int64(len(vals))
			}
		}
		return n
	case "findAndModify":
		return num(reply.Lookup("lastErrorObject", "n"))
	case "bulkWrite":
		return num(reply.Lookup("nInserted")) + num(reply.Lookup("nModified")) + num(reply.Lookup("nUpserted")) + num(reply.Lookup("nDeleted"))
	}
	return 0
}

// docWrites counts the documents written by class of collection, from the
// replies of the write commands a monitor saw start.
type docWrites struct {
	mu      sync.Mutex
	started map[int64]string // request id → collection class, until its reply
	by      map[string]int64
}

// start notes a write command's collection, to count its reply's writes.
func (w *docWrites) start(requestID int64, coll string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started == nil {
		w.started = map[int64]string{}
	}
	w.started[requestID] = writeClass(coll)
}

// succeeded counts the writes of the reply to request requestID.
func (w *docWrites) succeeded(requestID int64, command string, reply bson.Raw) {
	w.mu.Lock()
	defer w.mu.Unlock()
	class, ok := w.started[requestID]
	if !ok {
		return
	}
	delete(w.started, requestID)
	if w.by == nil {
		w.by = map[string]int64{}
	}
	w.by[class] += written(command, reply)
}

// failed forgets a request that got no reply.
func (w *docWrites) failed(requestID int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.started, requestID)
}

func (w *docWrites) reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.by = nil
}

// perTransfer returns the writes per transfer of n, by class.
func (w *docWrites) perTransfer(n int) writesPer {
	w.mu.Lock()
	defer w.mu.Unlock()
	f := func(class string) float64 { return float64(w.by[class]) / float64(n) }
	return writesPer{accounts: f(collAccounts), transactions: f(collTransactions), others: f(collOthers)}
}

// writesPer is documents written per finished transfer, by collection.
type writesPer struct{ accounts, transactions, others float64 }

func (w writesPer) total() float64 { return w.accounts + w.transactions + w.others }

// String reads "7.00 (accounts 4.00, transactions 3.00, others 0.00)".
func (w writesPer) String() string {
	return fmt.Sprintf("%.2f (accounts %.2f, transactions %.2f, others %.2f)", w.total(), w.accounts, w.transactions, w.others)
}
