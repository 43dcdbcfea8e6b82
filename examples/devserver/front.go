package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// FrontOptions configures a [Front].
type FrontOptions struct {
	// Seed seeds the random source used by fault rules that have no Seed of
	// their own. Zero picks a random seed.
	Seed uint64

	// Logger receives the front's diagnostics (refused messages, backend
	// dial failures, a backend that stops answering) at debug and warn
	// level. Nil discards them.
	Logger *slog.Logger

	// StallWarning is how long a request may be at the backend before the
	// front warns that it (and so every client) is waiting on it. Zero
	// means [DefaultStallWarning].
	StallWarning time.Duration

	// StatementPause, if positive, pauses a write command between its
	// statements, and a multi-document statement between its documents,
	// for a random time in [0, StatementPause), drawn from a source seeded
	// by Seed, with the front's lock released: randomized runs use it to
	// widen the windows in which other clients' requests land in the
	// middle of a command, as they may on MongoDB.
	StatementPause time.Duration
}

// DefaultStallWarning is the default [FrontOptions.StallWarning]. A request
// that long at FerretDB, counting all the statements of a write command, is
// most likely never coming back.
const DefaultStallWarning = 10 * time.Second

// Stats counts what a [Front] has done since it started.
type Stats struct {
	// Forwarded is the number of client requests sent to the backend,
	// including those later dropped by DropAfterForward or held back by
	// Delay. A write command counts once, although the front sends the
	// backend one command per statement.
	Forwarded uint64 `json:"forwarded"`
	// DropBeforeForward is the number of requests dropped unsent.
	DropBeforeForward uint64 `json:"drop_before_forward"`
	// DropAfterForward is the number of replies dropped after the backend
	// applied the request.
	DropAfterForward uint64 `json:"drop_after_forward"`
	// Delay is the number of replies held back by a Delay fault.
	Delay uint64 `json:"delay"`
}

// Front is a MongoDB wire protocol proxy that lets one request through at a
// time across all client connections, and injects faults on request.
//
// For each client connection it opens its own connection to the backend
// (over TCP for [NewFront]; a [Server]'s front hands each request to
// FerretDB in process, in the client connection's goroutine). It reads a whole message from the client, takes a lock shared by all
// connections, runs the request on the backend and reads the whole reply,
// releases the lock and relays the reply. Put before a server whose updates
// are read-modify-write, such as FerretDB v1, this makes every
// single-document update and findAndModify atomic, and no more: as on
// MongoDB ("the modification of each document is atomic, but the
// operation as a whole is not atomic", manual, Atomicity and
// Transactions), a write command's statements each take the lock on their
// own, and other clients' requests land between them; a multi-document
// update (multi: true) or delete (limit: 0) reads the _ids its filter
// matches under the lock, then writes each document under the lock on its
// own, with {_id: id, $and: [filter]}, so a document that stopped matching
// meanwhile is not touched, as MongoDB re-checks the filter on each
// document. StatementPause widens those gaps.
//
// An update, delete or insert command sent as OP_MSG, its statements
// inline or in a document sequence, runs statement by statement: the
// front sends the backend one command per statement (per document, for a
// multi-document one),
// carrying every other field of the client's command, and answers the
// client with the reply MongoDB documents for the whole command: n (and
// nModified), upserted and writeErrors entries under their statement's
// index, an ordered command stopping at its first error and an unordered
// one going on, a writeConcernError passed on. It does so because FerretDB
// v1.24 answers a command of several statements otherwise (an update stops
// at its first error and reports it at index 0 without n or nModified, and
// numbers upserts by their count; an ordered insert goes on past an error
// after 100 documents) and holds a SQLite connection for each
// single-document update statement until the command ends, so a command of
// 100 of them, its pool's size, never returns. There is no limit on
// statements per command. DIFFERENCES.md lists what still differs from
// MongoDB.
//
// Any other request is forwarded as it is. One with the moreToCome flag (an
// unacknowledged write) gets no reply; the front sends it without the flag
// and drops the answer, because FerretDB v1 answers it all the same and the
// answer would otherwise be taken for the next request's.
//
// A fault rule applies to a client's request as a whole: DropBeforeForward
// sends none of a write command's statements, DropAfterForward drops the
// reply once all of them ran, Delay holds back the reply put together from
// theirs.
//
// Only OP_MSG and the legacy OP_QUERY are forwarded; a client sending any
// other message (including OP_COMPRESSED: do not enable compression in the
// driver) is disconnected. A reply with the moreToCome flag is followed by
// the next ones under the same lock, so an exhaust cursor works but a
// streaming (awaitable) hello would block everyone; FerretDB v1 offers
// neither.
type Front struct {
	backend string // the backend's name, for the logs
	dial    dialer
	ln      net.Listener
	log     *slog.Logger
	faults  *faultSet
	stall   time.Duration

	failPoint failPoint // MongoDB's failCommand (failpoint.go)

	serial sync.Mutex // held while a request (or one statement of a write) is at the backend
	work   workLog    // the backend's time under serial, by command and collection
	pause  *pauser    // StatementPause; nil: none

	// between, if set (tests only), is called between two statements of a
	// write command and between the documents of a multi-document
	// statement, with the lock released: stmt is the statement's index,
	// doc the number of its documents already written (-1 before the
	// statement starts).
	between func(stmt, doc int)

	forwarded, dropBefore, dropAfter, delayed atomic.Uint64
	requestID                                 atomic.Int32 // of the messages the front writes itself

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	connsMu sync.Mutex
	conns   map[io.Closer]struct{} // client and backend connections; nil once closed

	closeOnce sync.Once
	closeErr  error
}

// NewFront starts a Front listening on addr (for example "127.0.0.1:0")
// that forwards to the MongoDB server at backend ("host:port"), over a
// connection of its own for each client connection. It returns once the
// listener is bound; call [Front.Close] to stop it. A [Server]'s front
// hands its requests to FerretDB in process instead.
func NewFront(addr, backend string, opts FrontOptions) (*Front, error) {
	return newFront(addr, backend, dialTCP(backend), opts)
}

// newFront starts a Front on addr whose client connections each reach the
// backend (named backend in the logs) by a connection dial opens.
func newFront(addr, backend string, dial dialer, opts FrontOptions) (*Front, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("devserver: front listening on %s: %w", addr, err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	stall := opts.StallWarning
	if stall <= 0 {
		stall = DefaultStallWarning
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Front{
		pause:   newPauser(opts.Seed, opts.StatementPause),
		stall:   stall,
		backend: backend,
		dial:    dial,
		ln:      ln,
		log:     logger,
		faults:  newFaultSet(opts.Seed),
		ctx:     ctx,
		cancel:  cancel,
		conns:   make(map[io.Closer]struct{}),
	}
	f.wg.Add(1)
	go f.acceptLoop()
	return f, nil
}

// Addr returns the address the front listens on.
func (f *Front) Addr() net.Addr { return f.ln.Addr() }

// URI returns the mongodb:// connection string of the front.
func (f *Front) URI() string { return "mongodb://" + f.ln.Addr().String() + "/" }

// AddFault installs a fault rule and returns its id.
func (f *Front) AddFault(fault Fault) (uint64, error) { return f.faults.add(fault) }

// RemoveFault removes the rule with the given id and reports whether it was
// still installed.
func (f *Front) RemoveFault(id uint64) bool { return f.faults.remove(id) }

// ClearFaults removes all fault rules.
func (f *Front) ClearFaults() { f.faults.clear() }

// Faults returns the installed rules, in the order they are tried.
func (f *Front) Faults() []FaultStatus { return f.faults.list() }

// Stats returns the front's counters.
func (f *Front) Stats() Stats {
	return Stats{
		Forwarded:         f.forwarded.Load(),
		DropBeforeForward: f.dropBefore.Load(),
		DropAfterForward:  f.dropAfter.Load(),
		Delay:             f.delayed.Load(),
	}
}

// Work returns the backend's time on each kind of request (command and
// collection) since the front started or [Front.ResetWork], the busiest
// first. Requests the front lets through without its lock (hello, ping,
// buildInfo) are not counted.
func (f *Front) Work() []Work { return f.work.list() }

// ResetWork forgets the time [Front.Work] reports.
func (f *Front) ResetWork() { f.work.reset() }

// Close stops accepting connections, closes every client and backend
// connection and waits for the front's goroutines to finish. It is safe to
// call more than once.
func (f *Front) Close() error {
	f.closeOnce.Do(func() {
		f.cancel()
		if err := f.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			f.closeErr = fmt.Errorf("devserver: closing front listener: %w", err)
		}
		f.connsMu.Lock()
		for c := range f.conns {
			_ = c.Close()
		}
		f.conns = nil
		f.connsMu.Unlock()
		f.wg.Wait()
	})
	return f.closeErr
}

// track registers c to be closed by Close; it reports false (and closes c)
// if the front is already closed.
func (f *Front) track(c io.Closer) bool {
	f.connsMu.Lock()
	defer f.connsMu.Unlock()
	if f.conns == nil {
		_ = c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Front) untrack(c io.Closer) {
	f.connsMu.Lock()
	defer f.connsMu.Unlock()
	if f.conns != nil {
		delete(f.conns, c)
	}
	_ = c.Close()
}

func (f *Front) acceptLoop() {
	defer f.wg.Done()
	for {
		client, err := f.ln.Accept()
		if err != nil {
			if f.ctx.Err() == nil {
				f.log.Warn("front stopped accepting connections", slog.Any("error", err))
			}
			return
		}
		if !f.track(client) {
			return
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			defer f.untrack(client)
			if err := f.serve(client); err != nil && f.ctx.Err() == nil {
				f.log.Debug("front connection ended", slog.String("client", client.RemoteAddr().String()), slog.Any("error", err))
			}
		}()
	}
}

// serve relays one client connection until either side closes it or a
// fault drops it.
func (f *Front) serve(client net.Conn) error {
	backend, err := f.dial(f.ctx, client)
	if err != nil {
		f.log.Warn("front cannot reach backend", slog.String("backend", f.backend), slog.Any("error", err))
		return err
	}
	if !f.track(backend) {
		return net.ErrClosed
	}
	defer f.untrack(backend)

	for {
		msg, err := readMessage(client)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			if errors.Is(err, errUnsupported) {
				f.log.Warn("front refused a client message", slog.Any("error", err))
			}
			return fmt.Errorf("reading request: %w", err)
		}
		req, err := parseRequest(msg)
		if err != nil {
			f.log.Warn("front refused a client message", slog.Any("error", err))
			return err
		}

		canned, done, closeConn, after, err := f.failPointRequest(msg, &req)
		switch {
		case err != nil:
			return err
		case closeConn:
			return fmt.Errorf("fail point %s closes the connection on %q", failPointName, req.command)
		case done:
			if err := relay(client, canned); err != nil {
				return err
			}
			continue
		}

		fault, faulted := f.faults.pick(req.command)
		if faulted && fault.Kind == DropBeforeForward {
			f.dropBefore.Add(1)
			return fmt.Errorf("fault %s on %q", fault.Kind, req.command)
		}

		replies, err := f.roundTrip(backend, msg, req)
		if err == nil {
			replies, err = f.amendReplies(req, replies, after)
		}
		if err != nil {
			return err
		}

		if faulted {
			switch fault.Kind {
			case DropAfterForward:
				f.dropAfter.Add(1)
				return fmt.Errorf("fault %s on %q", fault.Kind, req.command)
			case Delay:
				f.delayed.Add(1)
				if err := sleep(f.ctx, fault.Delay); err != nil {
					return err
				}
			}
		}

		if err := relay(client, replies); err != nil {
			return err
		}
	}
}

// relay writes replies to the client.
func relay(client net.Conn, replies [][]byte) error {
	for _, reply := range replies {
		if _, err := client.Write(reply); err != nil {
			return fmt.Errorf("relaying reply: %w", err)
		}
	}
	return nil
}

// unserialized are the commands that read no data, which the front lets
// through without waiting for its lock: as MongoDB does, the server answers
// a handshake or a heartbeat while a long write runs. Otherwise a driver's
// heartbeats, queued behind the writes, would measure the writes' time as
// the round trip, and a driver that bounds operations by a deadline
// (client-side operation timeout) refuses to send one whose remaining time
// is below that "round trip".
var unserialized = map[string]bool{
	"hello": true, "isMaster": true, "ismaster": true, "ping": true, "buildInfo": true, "buildinfo": true,
}

// roundTrip runs the client's request on the backend and returns the
// messages to relay to the client (none for a request with the moreToCome
// flag). An update, delete or insert command runs statement by statement,
// each under the front's lock (runWrite); anything else is forwarded as it
// is, under the lock for the whole request (but see unserialized), so no
// other request reaches the backend in between (forward). If
// the request takes longer than the stall warning, the front says so in the
// log: every client is waiting.
func (f *Front) roundTrip(backend backendConn, msg []byte, req request) ([][]byte, error) {
	serialized := !unserialized[req.command]
	if serialized && req.write == nil { // a write takes the lock per statement (runWrite)
		f.serial.Lock()
		defer f.serial.Unlock()
	}
	start := time.Now()
	warning := time.AfterFunc(f.stall, func() {
		msg := "front waits for a backend that has not answered"
		if serialized {
			msg += "; every client waits with it"
		}
		f.log.Warn(msg, slog.String("command", req.command), slog.Duration("waiting", time.Since(start)))
	})
	defer func() {
		if !warning.Stop() { // it fired: say when the wait ended
			f.log.Warn("front's wait for the backend ended",
				slog.String("command", req.command), slog.Duration("waited", time.Since(start)))
		}
	}()

	if req.write != nil {
		var busy time.Duration
		defer func() { f.work.add(req.command, req.collection, len(req.write.statements), busy) }()
		return f.runWrite(backend, req, &busy)
	}
	if serialized {
		defer func() { f.work.add(req.command, req.collection, 1, time.Since(start)) }()
	}
	return f.forward(backend, msg, req)
}

// forward sends msg to the backend and reads its replies, following those
// with the moreToCome flag (exhaust cursors). A request with the moreToCome
// flag is sent without it and its reply dropped (see acknowledged): FerretDB
// v1 answers such a request all the same, and a reply left unread would be
// taken for the answer to the client's next request.
func (f *Front) forward(backend backendConn, msg []byte, req request) ([][]byte, error) {
	if !req.expectsReply && opCode(msg) == opMsg {
		msg = acknowledged(msg)
	}
	if err := backend.send(msg); err != nil {
		return nil, fmt.Errorf("forwarding request: %w", err)
	}
	f.forwarded.Add(1)
	var replies [][]byte
	for {
		reply, err := backend.receive()
		if err != nil {
			return nil, fmt.Errorf("reading reply: %w", err)
		}
		replies = append(replies, reply)
		if !moreToCome(reply) {
			break
		}
	}
	if !req.expectsReply {
		return nil, nil
	}
	return replies, nil
}

// runWrite runs the write command req.write on the backend one statement at
// a time, each as a command of its own under the front's lock (taken and
// released per statement: other clients' requests land in between), that
// carries every other field of the client's command, and returns the
// reply MongoDB gives to the whole command: n (and nModified for update)
// summed over the statements, upserted and writeErrors entries under their
// statement's index, the last writeConcernError, ok: 1. An ordered command
// stops at the first statement that fails, an unordered one goes on. If
// the first statement fails with ok: 0, the command's own fields are what
// FerretDB refused, so that reply is relayed as the command's error
// (MongoDB's reply to a command error); a later statement failing with ok:
// 0 becomes that statement's write error. A multi-document statement runs
// a document at a time (runMulti). It adds the time the backend held the
// lock to *busy.
func (f *Front) runWrite(backend backendConn, req request, busy *time.Duration) ([][]byte, error) {
	w := req.write
	s := &statementRunner{f: f, backend: backend, w: w, busy: busy}
	var res writeResult
	for i, stmt := range w.statements {
		if i > 0 {
			f.gap(i, -1)
		}
		if we, ok := w.failAt[i]; ok { // the fail point's (failpoint.go)
			res.failed(i, we)
			if w.ordered {
				break
			}
			continue
		}
		var reply bson.Raw
		var err error
		if w.multi(stmt) {
			reply, err = s.runMulti(i, stmt)
		} else {
			reply, err = s.run(i, stmt)
		}
		if err != nil {
			return nil, err
		}
		if i == 0 {
			f.forwarded.Add(1) // one per client request, however many statements
		}
		if ok, _ := reply.Lookup("ok").AsFloat64OK(); ok == 1 {
			res.add(i, reply)
		} else {
			switch {
			case uniqueViolation(reply):
				res.duplicateKey(i, w)
			case i == 0:
				return f.replyTo(req, reply), nil
			default:
				res.failed(i, reply)
			}
		}
		if w.ordered && len(res.writeErrors) > 0 {
			break
		}
	}
	body, err := res.reply(w.kind)
	if err != nil {
		return nil, err
	}
	return f.replyTo(req, body), nil
}

// gap is the moment between two statements of a write, or two documents
// of a multi-document statement, with the lock released: the test hook,
// then the configured pause.
func (f *Front) gap(stmt, doc int) {
	if f.between != nil {
		f.between(stmt, doc)
	}
	if d := f.pause.next(); d > 0 {
		_ = sleep(f.ctx, d)
	}
}

// statementRunner sends the statements of one write command to the
// backend, each under the front's lock.
type statementRunner struct {
	f       *Front
	backend backendConn
	w       *writeCommand
	busy    *time.Duration
}

// command sends one command to the backend under the lock and returns its
// reply.
func (s *statementRunner) command(what string, cmd []byte) (bson.Raw, error) {
	s.f.serial.Lock()
	defer s.f.serial.Unlock()
	start := time.Now()
	defer func() { *s.busy += time.Since(start) }()
	if err := s.backend.send(opMsgMessage(s.f.nextRequestID(), 0, cmd)); err != nil {
		return nil, fmt.Errorf("forwarding %s: %w", what, err)
	}
	msg, err := s.backend.receive()
	if err != nil {
		return nil, fmt.Errorf("reading reply to %s: %w", what, err)
	}
	reply, err := opMsgReply(msg)
	if err != nil {
		return nil, fmt.Errorf("reply to %s: %w", what, err)
	}
	return reply, nil
}

// run sends statement i as a command of its own.
func (s *statementRunner) run(i int, stmt bson.Raw) (bson.Raw, error) {
	what := fmt.Sprintf("statement %d of %s", i, s.w.kind.name)
	cmd, err := s.w.statementCommand(stmt)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return s.command(what, cmd)
}

// runMulti runs statement i, an update with multi: true or a delete with
// limit: 0, a document at a time, as MongoDB does: it reads the _ids the
// filter matches (under the lock), then writes each document with
// {_id: id, $and: [filter]} as a single-document statement (each under
// the lock), so that a document another client changed in between is
// written only if it still matches, and returns one reply for the
// statement, its n and nModified summed. A write error stops the
// statement there. An upsert that matched nothing is sent as the client
// sent it, so that it inserts ("If upsert: true and no documents match the
// filter, db.collection.updateMany() creates a new document", manual,
// updateMany).
func (s *statementRunner) runMulti(i int, stmt bson.Raw) (bson.Raw, error) {
	what := fmt.Sprintf("statement %d of %s", i, s.w.kind.name)
	find, err := s.w.findIDs(stmt)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	found, err := s.command("the _ids of "+what, find)
	if err != nil {
		return nil, err
	}
	if ok, _ := found.Lookup("ok").AsFloat64OK(); ok != 1 {
		return found, nil // the filter is refused: the statement's error
	}
	ids, err := cursorIDs(found)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(ids) == 0 && s.w.upsert(stmt) {
		return s.run(i, stmt)
	}
	var res writeResult
	for k, id := range ids {
		s.f.gap(i, k)
		one, err := s.w.oneDocument(stmt, id)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		reply, err := s.run(i, one)
		if err != nil {
			return nil, err
		}
		if ok, _ := reply.Lookup("ok").AsFloat64OK(); ok != 1 {
			return reply, nil
		}
		res.add(0, reply)
		if len(res.writeErrors) > 0 {
			break
		}
	}
	body, err := res.reply(s.w.kind)
	if err != nil {
		return nil, err
	}
	return body, nil
}

// replyTo returns the OP_MSG that answers req with body, or nothing if req
// expects no reply.
func (f *Front) replyTo(req request, body []byte) [][]byte {
	if !req.expectsReply {
		return nil
	}
	return [][]byte{opMsgMessage(f.nextRequestID(), req.requestID, body)}
}

// nextRequestID returns a requestID for a message the front writes itself.
func (f *Front) nextRequestID() int32 { return f.requestID.Add(1) }

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
