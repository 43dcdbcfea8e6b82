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
// For each client connection it opens its own connection to the backend.
// It reads a whole message from the client, takes a lock shared by all
// connections, runs the request on the backend and reads the whole reply,
// releases the lock and relays the reply. Put before a server whose updates
// are read-modify-write, such as FerretDB v1, this makes every
// single-document update and findAndModify atomic (and every whole
// command, which code must not rely on: MongoDB does not promise it).
//
// An update, delete or insert command sent as OP_MSG, its statements
// inline or in a document sequence, runs statement by statement, still
// under the lock: the front sends the backend one command per statement,
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
	backend string
	ln      net.Listener
	log     *slog.Logger
	faults  *faultSet
	stall   time.Duration

	serial sync.Mutex // held while a request is at the backend
	work   workLog    // the backend's time under serial, by command and collection

	forwarded, dropBefore, dropAfter, delayed atomic.Uint64
	requestID                                 atomic.Int32 // of the messages the front writes itself

	ctx    context.Context // canceled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	connsMu sync.Mutex
	conns   map[net.Conn]struct{} // nil once closed

	closeOnce sync.Once
	closeErr  error
}

// NewFront starts a Front listening on addr (for example "127.0.0.1:0")
// that forwards to the MongoDB server at backend ("host:port"). It returns
// once the listener is bound; call [Front.Close] to stop it.
func NewFront(addr, backend string, opts FrontOptions) (*Front, error) {
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
		stall:   stall,
		backend: backend,
		ln:      ln,
		log:     logger,
		faults:  newFaultSet(opts.Seed),
		ctx:     ctx,
		cancel:  cancel,
		conns:   make(map[net.Conn]struct{}),
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
func (f *Front) track(c net.Conn) bool {
	f.connsMu.Lock()
	defer f.connsMu.Unlock()
	if f.conns == nil {
		_ = c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Front) untrack(c net.Conn) {
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
	var d net.Dialer
	backend, err := d.DialContext(f.ctx, "tcp", f.backend)
	if err != nil {
		f.log.Warn("front cannot reach backend", slog.String("backend", f.backend), slog.Any("error", err))
		return fmt.Errorf("dialing backend %s: %w", f.backend, err)
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

		fault, faulted := f.faults.pick(req.command)
		if faulted && fault.Kind == DropBeforeForward {
			f.dropBefore.Add(1)
			return fmt.Errorf("fault %s on %q", fault.Kind, req.command)
		}

		replies, err := f.roundTrip(backend, msg, req)
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

		for _, reply := range replies {
			if _, err := client.Write(reply); err != nil {
				return fmt.Errorf("relaying reply: %w", err)
			}
		}
	}
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

// roundTrip runs the client's request on the backend while holding the
// front's lock (but see unserialized), so no other request reaches the
// backend in between, and
// returns the messages to relay to the client (none for a request with the
// moreToCome flag). An update, delete or insert command runs statement by
// statement (runWrite); anything else is forwarded as it is (forward). If
// the request takes longer than the stall warning, the front says so in the
// log: every client is waiting.
func (f *Front) roundTrip(backend net.Conn, msg []byte, req request) ([][]byte, error) {
	serialized := !unserialized[req.command]
	if serialized {
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

	if serialized {
		defer func() {
			statements := 1
			if req.write != nil {
				statements = len(req.write.statements)
			}
			f.work.add(req.command, req.collection, statements, time.Since(start))
		}()
	}
	if req.write != nil {
		return f.runWrite(backend, req)
	}
	return f.forward(backend, msg, req)
}

// forward sends msg to the backend and reads its replies, following those
// with the moreToCome flag (exhaust cursors). A request with the moreToCome
// flag is sent without it and its reply dropped (see acknowledged): FerretDB
// v1 answers such a request all the same, and a reply left unread would be
// taken for the answer to the client's next request.
func (f *Front) forward(backend net.Conn, msg []byte, req request) ([][]byte, error) {
	if !req.expectsReply && opCode(msg) == opMsg {
		msg = acknowledged(msg)
	}
	if _, err := backend.Write(msg); err != nil {
		return nil, fmt.Errorf("forwarding request: %w", err)
	}
	f.forwarded.Add(1)
	var replies [][]byte
	for {
		reply, err := readMessage(backend)
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
// a time, each as a command of its own that carries every other field of
// the client's command, and returns the reply MongoDB gives to the whole
// command: n (and nModified for update) summed over the statements,
// upserted and writeErrors entries under their statement's index, the last
// writeConcernError, ok: 1. An ordered command stops at the first statement
// that fails, an unordered one goes on. If the first statement fails with
// ok: 0, the command's own fields are what FerretDB refused, so that reply
// is relayed as the command's error (MongoDB's reply to a command error);
// a later statement failing with ok: 0 becomes that statement's write
// error.
func (f *Front) runWrite(backend net.Conn, req request) ([][]byte, error) {
	w := req.write
	var res writeResult
	for i, stmt := range w.statements {
		cmd, err := w.statementCommand(stmt)
		if err != nil {
			return nil, fmt.Errorf("statement %d of %s: %w", i, w.kind.name, err)
		}
		if _, err := backend.Write(opMsgMessage(f.nextRequestID(), 0, cmd)); err != nil {
			return nil, fmt.Errorf("forwarding statement %d of %s: %w", i, w.kind.name, err)
		}
		if i == 0 {
			f.forwarded.Add(1) // one per client request, however many statements
		}
		msg, err := readMessage(backend)
		if err != nil {
			return nil, fmt.Errorf("reading reply to statement %d of %s: %w", i, w.kind.name, err)
		}
		reply, err := opMsgReply(msg)
		if err != nil {
			return nil, fmt.Errorf("reply to statement %d of %s: %w", i, w.kind.name, err)
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
