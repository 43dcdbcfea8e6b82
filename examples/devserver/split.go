package devserver

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// This file runs a client's update, delete or insert command one statement
// at a time, because FerretDB v1.24 answers a command of several statements
// unlike MongoDB and can hang on a long one:
//
//   - update (handler/msg_update.go) stops at the first failing statement
//     whatever ordered says, then replies with that statement's writeError
//     at index 0 and no n or nModified; it numbers upserted entries by their
//     count instead of their statement's index; and it holds a SQLite
//     connection for each multi: false statement until the command ends
//     (defer closer.Close() inside its loop), so a command of 100 such
//     statements exhausts the pool of 100 and never answers.
//   - an ordered insert (handler/msg_insert.go) goes on with its next batch
//     of 100 documents after a duplicate key.
//   - even a one-statement update that fails replies without n and
//     nModified.
//
// A command of one statement answers as MongoDB does, so the front sends
// one such command per statement and puts MongoDB's reply together itself.

// writeKind is one of the write commands the front runs statement by
// statement.
type writeKind struct {
	name      string // command name: "update", "delete" or "insert"
	array     string // field holding the statements: "updates", "deletes" or "documents"
	nModified bool   // whether the reply has nModified (update)
}

// writeKindOf returns the writeKind of command, if it is one. Command names
// are case sensitive, in MongoDB as in FerretDB.
func writeKindOf(command string) (writeKind, bool) {
	switch command {
	case "update":
		return writeKind{name: "update", array: "updates", nModified: true}, true
	case "delete":
		return writeKind{name: "delete", array: "deletes"}, true
	case "insert":
		return writeKind{name: "insert", array: "documents"}, true
	default:
		return writeKind{}, false
	}
}

// writeCommand is a client's update, delete or insert command taken apart
// to be run one statement at a time.
type writeCommand struct {
	kind       writeKind
	db, coll   string
	fields     []bson.RawElement // the command's fields but the statements, in order
	arrayAt    int               // position of the statements among fields
	statements []bson.Raw
	ordered    bool
	failAt     map[int]bson.Raw // statements the fail point fails, by index: their ok: 0 replies (failpoint.go)
}

// parseWriteCommand returns the write command in an OP_MSG's sections, or
// nil if command is not update, delete or insert or if the message is not
// one the front takes apart with confidence (malformed sections, no
// statement, statements both inline and in a document sequence, another
// document sequence, a statement that is not a document): such a message
// is forwarded as it is and FerretDB answers it.
func parseWriteCommand(command string, sections []byte) *writeCommand {
	kind, ok := writeKindOf(command)
	if !ok {
		return nil
	}
	body, seqs, ok := opMsgSections(sections)
	if !ok {
		return nil
	}
	elems, err := body.Elements()
	if err != nil {
		return nil
	}
	w := &writeCommand{kind: kind, arrayAt: -1, ordered: true}
	for _, e := range elems {
		v := e.Value()
		switch e.Key() {
		case kind.array: // inline: updates: [...]
			if w.arrayAt >= 0 {
				return nil
			}
			stmts, ok := documents(v)
			if !ok {
				return nil
			}
			w.statements, w.arrayAt = stmts, len(w.fields)
			continue
		case kind.name:
			w.coll, _ = v.StringValueOK()
		case "$db":
			w.db, _ = v.StringValueOK()
		case "ordered":
			w.ordered = truthy(v)
		case "comment":
			// MongoDB takes a comment of any type; FerretDB's update and
			// delete take only a string (TypeMismatch otherwise) and do
			// nothing with it but log it, so any other one is dropped.
			if kind.name != "insert" && v.Type != bson.TypeString {
				continue
			}
		case "bypassDocumentValidation":
			// MongoDB takes it on every write command; FerretDB's delete
			// rejects it as an unknown field and has no validation to
			// bypass, so it is dropped there.
			if kind.name == "delete" {
				continue
			}
		}
		// Everything else ($db, lsid, txnNumber, writeConcern, let,
		// maxTimeMS, $clusterTime, apiVersion, ...) goes with each
		// statement as the client sent it, so FerretDB accepts, ignores or
		// rejects it as it would a command of that one statement (it
		// rejects let with NotImplemented: dropping it would silently change
		// what the statements mean).
		w.fields = append(w.fields, e)
	}
	for _, s := range seqs { // the Go driver's form: a kind 1 section "updates"
		if s.id != kind.array || w.arrayAt >= 0 {
			return nil
		}
		w.statements, w.arrayAt = s.docs, len(w.fields)
	}
	if len(w.statements) == 0 {
		return nil // MongoDB rejects an empty batch; let FerretDB answer
	}
	return w
}

// documents returns the elements of the array v, if they are all documents.
func documents(v bson.RawValue) ([]bson.Raw, bool) {
	arr, ok := v.ArrayOK()
	if !ok {
		return nil, false
	}
	vals, err := arr.Values()
	if err != nil {
		return nil, false
	}
	docs := make([]bson.Raw, 0, len(vals))
	for _, v := range vals {
		d, ok := v.DocumentOK()
		if !ok {
			return nil, false
		}
		docs = append(docs, d)
	}
	return docs, true
}

// truthy reports whether v counts as true: a boolean or a non-zero number.
// Anything else counts as true, ordered's default.
func truthy(v bson.RawValue) bool {
	if b, ok := v.BooleanOK(); ok {
		return b
	}
	if f, ok := v.AsFloat64OK(); ok {
		return f != 0
	}
	return true
}

// statementCommand returns the command that runs the one statement stmt:
// the client's command with stmt as its only statement, inline.
//
// It writes the bytes bson.Marshal writes for that command
// (statementCommandMarshal): each field's element as the client sent it,
// and stmt's bytes in an array of one. bson.Marshal copied them through
// its value writer, with the allocations of a bson.D and its reflection:
// about 2% of the dev server's CPU time through BenchmarkTransfer. A
// statement that is not valid BSON goes through bson.Marshal, for its
// error as before.
func (w *writeCommand) statementCommand(stmt bson.Raw) ([]byte, error) {
	if stmt.Validate() != nil {
		return w.statementCommandMarshal(stmt)
	}
	stmt = stmt[:binary.LittleEndian.Uint32(stmt)] // Validate read its length; bson.Marshal copies that much
	arrayLen := 4 + 1 + 2 + len(stmt) + 1          // {"0": stmt}
	size := 4 + 1 + len(w.kind.array) + 1 + arrayLen + 1
	for _, e := range w.fields {
		size += len(e)
	}
	b := make([]byte, 0, size)
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	appendArray := func() {
		b = append(b, byte(bson.TypeArray))
		b = append(b, w.kind.array...)
		b = append(b, 0)
		b = binary.LittleEndian.AppendUint32(b, uint32(arrayLen))
		b = append(b, byte(bson.TypeEmbeddedDocument), '0', 0)
		b = append(b, stmt...)
		b = append(b, 0)
	}
	for i, e := range w.fields {
		if i == w.arrayAt {
			appendArray()
		}
		b = append(b, e...)
	}
	if w.arrayAt == len(w.fields) {
		appendArray()
	}
	return append(b, 0), nil
}

// statementCommandMarshal is statementCommand through bson.Marshal.
func (w *writeCommand) statementCommandMarshal(stmt bson.Raw) ([]byte, error) {
	cmd := make(bson.D, 0, len(w.fields)+1)
	for i, e := range w.fields {
		if i == w.arrayAt {
			cmd = append(cmd, bson.E{Key: w.kind.array, Value: bson.A{stmt}})
		}
		cmd = append(cmd, bson.E{Key: e.Key(), Value: e.Value()})
	}
	if w.arrayAt == len(w.fields) {
		cmd = append(cmd, bson.E{Key: w.kind.array, Value: bson.A{stmt}})
	}
	b, err := bson.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encoding statement command: %w", err)
	}
	return b, nil
}

// writeResult gathers the replies to a command's statements into the reply
// MongoDB gives to the whole command
// (https://www.mongodb.com/docs/manual/reference/command/update/#output and
// the Output sections of delete and insert).
type writeResult struct {
	n, nModified int64
	upserted     bson.A // {index, _id}, index being the statement's
	writeErrors  bson.A // {index, code, errmsg, ...}, index being the statement's
	wcError      bson.RawValue
	extra        []bson.RawElement // other fields of the last reply, such as a replica set's $clusterTime
}

// add takes in the ok: 1 reply to statement i.
func (r *writeResult) add(i int, reply bson.Raw) {
	elems, err := reply.Elements()
	if err != nil {
		return // opMsgReply validated it
	}
	r.extra = r.extra[:0]
	for _, e := range elems {
		v := e.Value()
		switch e.Key() {
		case "ok":
		case "n":
			n, _ := v.AsInt64OK()
			r.n += n
		case "nModified":
			n, _ := v.AsInt64OK()
			r.nModified += n
		case "upserted":
			docs, _ := documents(v)
			for _, d := range docs {
				r.upserted = append(r.upserted, bson.D{
					{Key: "index", Value: int32(i)},
					{Key: "_id", Value: d.Lookup("_id")},
				})
			}
		case "writeErrors":
			docs, _ := documents(v)
			for _, d := range docs {
				r.writeErrors = append(r.writeErrors, statementError(i, d))
			}
		case "writeConcernError":
			r.wcError = v
		default:
			r.extra = append(r.extra, e)
		}
	}
}

// statementError returns the write error we with its index set to i.
func statementError(i int, we bson.Raw) bson.D {
	d := bson.D{{Key: "index", Value: int32(i)}}
	elems, _ := we.Elements()
	for _, e := range elems {
		if e.Key() != "index" {
			d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	return d
}

// failed takes in the ok: 0 reply to statement i, a statement after the
// first (so the command's own fields are fine), as a write error of that
// statement.
func (r *writeResult) failed(i int, reply bson.Raw) {
	code, _ := reply.Lookup("code").AsInt64OK()
	errmsg, _ := reply.Lookup("errmsg").StringValueOK()
	we := bson.D{
		{Key: "index", Value: int32(i)},
		{Key: "code", Value: int32(code)},
		{Key: "errmsg", Value: errmsg},
	}
	if info, ok := reply.Lookup("errInfo").DocumentOK(); ok {
		we = append(we, bson.E{Key: "errInfo", Value: info})
	}
	r.writeErrors = append(r.writeErrors, we)
}

// duplicateKey takes in a duplicate key error of statement i.
func (r *writeResult) duplicateKey(i int, w *writeCommand) {
	r.writeErrors = append(r.writeErrors, bson.D{
		{Key: "index", Value: int32(i)},
		{Key: "code", Value: int32(11000)},
		{Key: "errmsg", Value: fmt.Sprintf("E11000 duplicate key error collection: %s.%s", w.db, w.coll)},
	})
}

// uniqueViolation reports whether reply is FerretDB's ok: 0 InternalError
// for an update that breaks a unique index: its SQLite backend reports
// that as an internal error (backends/sqlite/collection.go UpdateAll),
// where MongoDB gives a write error E11000.
func uniqueViolation(reply bson.Raw) bool {
	code, _ := reply.Lookup("code").AsInt64OK()
	errmsg, _ := reply.Lookup("errmsg").StringValueOK()
	return code == 1 && strings.Contains(errmsg, "UNIQUE constraint failed")
}

// reply returns the reply to the whole command.
func (r *writeResult) reply(kind writeKind) ([]byte, error) {
	d := bson.D{{Key: "n", Value: countValue(r.n)}}
	if kind.nModified {
		d = append(d, bson.E{Key: "nModified", Value: countValue(r.nModified)})
	}
	if len(r.upserted) > 0 {
		d = append(d, bson.E{Key: "upserted", Value: r.upserted})
	}
	if len(r.writeErrors) > 0 {
		d = append(d, bson.E{Key: "writeErrors", Value: r.writeErrors})
	}
	if r.wcError.Type != 0 {
		d = append(d, bson.E{Key: "writeConcernError", Value: r.wcError})
	}
	d = append(d, bson.E{Key: "ok", Value: 1.0})
	for _, e := range r.extra {
		d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
	}
	b, err := bson.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encoding %s reply: %w", kind.name, err)
	}
	return b, nil
}

// countValue returns n as MongoDB writes a count: an int32, or an int64 if it
// does not fit.
func countValue(n int64) any {
	if n >= math.MinInt32 && n <= math.MaxInt32 {
		return int32(n)
	}
	return n
}

// multi reports whether stmt writes many documents: an update with multi
// (true, or a non-zero number), or a delete with limit 0.
func (w *writeCommand) multi(stmt bson.Raw) bool {
	switch w.kind.name {
	case "update":
		v, err := stmt.LookupErr("multi")
		return err == nil && truthy(v)
	case "delete":
		n, ok := stmt.Lookup("limit").AsInt64OK()
		return ok && n == 0
	}
	return false
}

// upsert reports whether update statement stmt is an upsert.
func (w *writeCommand) upsert(stmt bson.Raw) bool {
	v, err := stmt.LookupErr("upsert")
	return w.kind.name == "update" && err == nil && truthy(v)
}

// findIDs returns the command that reads the _ids multi-document statement
// stmt matches: its filter, and its collation and hint if it gives them,
// in one batch.
func (w *writeCommand) findIDs(stmt bson.Raw) ([]byte, error) {
	cmd := bson.D{
		{Key: "find", Value: w.coll},
		{Key: "filter", Value: stmt.Lookup("q")},
		{Key: "projection", Value: bson.D{{Key: "_id", Value: 1}}},
		{Key: "batchSize", Value: int32(maxMultiDocuments)},
		{Key: "singleBatch", Value: true},
	}
	for _, key := range []string{"collation", "hint"} {
		if v, err := stmt.LookupErr(key); err == nil {
			cmd = append(cmd, bson.E{Key: key, Value: v})
		}
	}
	cmd = append(cmd, bson.E{Key: "$db", Value: w.db})
	b, err := bson.Marshal(cmd)
	if err != nil {
		return nil, fmt.Errorf("encoding the find of its _ids: %w", err)
	}
	return b, nil
}

// maxMultiDocuments bounds the documents one multi-document statement
// writes on the dev server (the _ids are read in one batch).
const maxMultiDocuments = 100_000

// oneDocument returns multi-document statement stmt narrowed to the
// document id: its filter {_id: id, $and: [filter]}, and multi: false,
// upsert: false (update) or limit: 1 (delete).
func (w *writeCommand) oneDocument(stmt bson.Raw, id bson.RawValue) (bson.Raw, error) {
	elems, err := stmt.Elements()
	if err != nil {
		return nil, err
	}
	d := make(bson.D, 0, len(elems))
	for _, e := range elems {
		switch e.Key() {
		case "q":
			d = append(d, bson.E{Key: "q", Value: bson.D{{Key: "_id", Value: id}, {Key: "$and", Value: bson.A{e.Value()}}}})
		case "multi", "upsert":
			d = append(d, bson.E{Key: e.Key(), Value: false})
		case "limit":
			d = append(d, bson.E{Key: "limit", Value: int32(1)})
		default:
			d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	return bson.Marshal(d)
}

// cursorIDs returns the _id of every document in a find reply's first
// batch.
func cursorIDs(reply bson.Raw) ([]bson.RawValue, error) {
	batch, ok := reply.Lookup("cursor", "firstBatch").ArrayOK()
	if !ok {
		return nil, fmt.Errorf("find reply without cursor.firstBatch: %s", reply)
	}
	vals, err := batch.Values()
	if err != nil {
		return nil, err
	}
	ids := make([]bson.RawValue, 0, len(vals))
	for _, v := range vals {
		doc, ok := v.DocumentOK()
		if !ok {
			return nil, fmt.Errorf("find reply with a non-document: %s", v)
		}
		ids = append(ids, doc.Lookup("_id"))
	}
	return ids, nil
}

// pauser draws the pauses of FrontOptions.StatementPause from a seeded
// source.
type pauser struct {
	mu  sync.Mutex
	rng *rand.Rand
	max time.Duration
}

// newPauser returns a pauser of pauses in [0, max) seeded by seed, or nil
// for no pauses.
func newPauser(seed uint64, max time.Duration) *pauser {
	if max <= 0 {
		return nil
	}
	return &pauser{rng: rand.New(rand.NewPCG(seed, 0x5eed)), max: max}
}

// next returns the next pause; 0 for a nil pauser.
func (p *pauser) next() time.Duration {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Duration(p.rng.Int64N(int64(p.max)))
}
