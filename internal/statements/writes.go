package statements

import (
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The classes of collections the benchmarks count document writes in:
// the accounts, the transactions (the log), and every other collection
// together.
const (
	Accounts     = "accounts"
	Transactions = "transactions"
	Others       = "others"
)

// Class returns the class of collection coll a write is counted in.
func Class(coll string) string {
	switch coll {
	case Accounts, Transactions:
		return coll
	}
	return Others
}

// Written returns the documents a write command's reply says it wrote:
// an insert's and a delete's n, an update's nModified plus its upserts, a
// findAndModify's lastErrorObject.n, a bulkWrite's counts. A statement
// that matched nothing wrote nothing; reads write nothing.
func Written(command string, reply bson.Raw) int64 {
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

// Writes counts the documents written by class of collection, from the
// replies of the write commands a command monitor saw start. Safe for
// concurrent use.
type Writes struct {
	mu      sync.Mutex
	started map[int64]string // request id → collection class, until its reply
	by      map[string]int64
}

// Start notes a write command's collection, to count its reply's writes.
func (w *Writes) Start(requestID int64, coll string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started == nil {
		w.started = map[int64]string{}
	}
	w.started[requestID] = Class(coll)
}

// Succeeded counts the writes of the reply to request requestID.
func (w *Writes) Succeeded(requestID int64, command string, reply bson.Raw) {
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
	w.by[class] += Written(command, reply)
}

// Failed forgets a request that got no reply.
func (w *Writes) Failed(requestID int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.started, requestID)
}

// Reset forgets the writes counted so far.
func (w *Writes) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.by = nil
}

// Get returns the writes counted in class.
func (w *Writes) Get(class string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.by[class]
}
