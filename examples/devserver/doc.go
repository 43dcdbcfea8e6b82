// Package devserver runs a MongoDB-compatible server for development and
// tests on machines without mongod or Docker: an embedded FerretDB v1
// (SQLite storage, pure Go) behind a [Front] that lets one statement
// through at a time.
//
// FerretDB v1 runs an update as read, change, write back, with nothing
// stopping two connections from interleaving, so on its own it loses
// concurrent $inc updates and lets two findAndModify calls claim the same
// document. Serializing every request in the front restores the
// single-document atomicity MongoDB guarantees, and no more: the front
// takes its lock per statement of a write command, and per document of an
// update of many or a delete of many, so other clients' requests land in
// between, as they may on MongoDB. FerretDB listens on no socket of its
// own: the front hands it each request in process, in the goroutine of the
// client's connection, one connection of FerretDB's for each of the
// front's.
//
// The front also runs every update, delete and insert command one statement
// at a time, one FerretDB command per statement, and answers with the
// reply MongoDB documents for the whole command. FerretDB v1.24 replies to
// a command of several statements in its own way (an update stops at its
// first error whatever ordered says and reports it at index 0 without n or
// nModified, upserted entries are numbered by count instead of by
// statement, an ordered insert of more than 100 documents goes on past an
// error), and it holds a SQLite connection for each single-document update
// statement until the command ends, so an update of 100 such statements
// never answered. Commands of any number of statements now work, and
// drivers read counts, upserted _ids and write errors as on MongoDB.
// DIFFERENCES.md lists what still differs from MongoDB.
//
// The front can also inject faults (dropped connections before or after the
// server applies a request, delayed replies) to exercise the ambiguous
// outcomes a real network produces; [ControlHandler] exposes this as an HTTP
// API for tests that cannot import this package. And it answers MongoDB's
// test fail point failCommand (configureFailPoint, as a mongod started
// with enableTestCommands does), so a test can make a command fail with a
// server's error code and labels (a primary stepping down, a shard's
// failover) and run unchanged against a real mongod; its one extension,
// data.writeErrorIndexes, fails single statements of a write command with
// write errors at their indexes (DIFFERENCES.md item 17).
//
//	s, err := devserver.Start(ctx, devserver.Config{Addr: "127.0.0.1:0"})
//	if err != nil { ... }
//	defer s.Close()
//	client, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
//	...
//	s.Front().AddFault(devserver.Fault{Command: "update", Kind: devserver.DropAfterForward, Count: 1})
//
// The command github.com/twopc/twopc/examples/cmd/devserver runs a Server as
// a separate process.
package devserver
