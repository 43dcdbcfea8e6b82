package devserver

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// received is a message a fakeBackend got.
type received struct {
	flags uint32
	body  bson.Raw
	seqs  []docSequence
}

// fakeBackend is a wire protocol server that answers every OP_MSG with
// what answer returns, moreToCome or not (as FerretDB v1 does), and records
// what it got. It lets the tests see exactly what the front sends, script
// replies FerretDB never gives (a writeConcernError, $clusterTime) and hold
// a statement at the backend.
type fakeBackend struct {
	t      *testing.T
	ln     net.Listener
	answer func(body bson.Raw) bson.D

	mu    sync.Mutex
	got   []received
	conns []net.Conn
	wg    sync.WaitGroup
}

func newFakeBackend(t *testing.T, answer func(body bson.Raw) bson.D) *fakeBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &fakeBackend{t: t, ln: ln, answer: answer}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			_ = c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *fakeBackend) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		b.conns = append(b.conns, c)
		b.mu.Unlock()
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.serve(c)
		}()
	}
}

func (b *fakeBackend) serve(c net.Conn) {
	for {
		msg, err := readMessage(c)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				b.t.Logf("fake backend: %v", err)
			}
			return
		}
		flags, sections, err := opMsgBody(msg)
		if err != nil {
			b.t.Errorf("fake backend got a message it cannot read: %v", err)
			return
		}
		body, seqs, ok := opMsgSections(sections)
		if !ok {
			b.t.Errorf("fake backend got malformed sections")
			return
		}
		b.mu.Lock()
		b.got = append(b.got, received{flags: flags, body: body, seqs: seqs})
		b.mu.Unlock()
		reply, err := bson.Marshal(b.answer(body))
		if err != nil {
			b.t.Errorf("fake backend: %v", err)
			return
		}
		requestID := int32(binary.LittleEndian.Uint32(msg[4:8]))
		if _, err := c.Write(opMsgMessage(1, requestID, reply)); err != nil {
			return
		}
	}
}

// received returns what the backend got so far.
func (b *fakeBackend) received() []received {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]received(nil), b.got...)
}

func (b *fakeBackend) addr() string { return b.ln.Addr().String() }

// startFront starts a Front before backend.
func startFront(t *testing.T, backend string) *Front {
	t.Helper()
	f, err := NewFront("127.0.0.1:0", backend, FrontOptions{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	return f
}

// dial connects to f as a raw wire protocol client.
func dial(t *testing.T, f *Front) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", f.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// opMsgRequest returns an OP_MSG with the given requestID, flags and
// sections (see section0 and section1).
func opMsgRequest(requestID int32, flags uint32, sections ...[]byte) []byte {
	body := [][]byte{u32(flags)}
	body = append(body, sections...)
	msg := message(opMsg, body...)
	binary.LittleEndian.PutUint32(msg[4:], uint32(requestID))
	return msg
}

func section0(t *testing.T, d bson.D) []byte { return append([]byte{0}, doc(t, d)...) }

// section1 returns a kind 1 section: the document sequence id.
func section1(t *testing.T, id string, docs ...bson.D) []byte {
	payload := append([]byte(id), 0)
	for _, d := range docs {
		payload = append(payload, doc(t, d)...)
	}
	return append(append([]byte{1}, u32(uint32(4+len(payload)))...), payload...)
}

// exchange sends msg on c and returns the reply's header fields and body.
func exchange(t *testing.T, c net.Conn, msg []byte) (responseTo int32, flags uint32, body bson.Raw) {
	t.Helper()
	_, err := c.Write(msg)
	require.NoError(t, err)
	return readReply(t, c)
}

func readReply(t *testing.T, c net.Conn) (responseTo int32, flags uint32, body bson.Raw) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(30*time.Second)))
	reply, err := readMessage(c)
	require.NoError(t, err)
	require.Equal(t, int32(opMsg), opCode(reply))
	flags, sections, err := opMsgBody(reply)
	require.NoError(t, err)
	require.Equal(t, byte(0), sections[0], "one kind 0 section")
	body, ok := document(sections[1:])
	require.True(t, ok)
	require.Len(t, sections, 1+len(body), "nothing after the body")
	return int32(binary.LittleEndian.Uint32(reply[8:12])), flags, body
}

// unmarshal decodes raw into a bson.D.
func unmarshal(t *testing.T, raw bson.Raw) bson.D {
	t.Helper()
	var d bson.D
	require.NoError(t, bson.Unmarshal(raw, &d))
	return d
}

// statementID returns the _id of the only statement's filter of a
// statement command, or nil.
func statementID(body bson.Raw) any {
	for _, array := range []string{"updates", "deletes"} {
		if v, err := body.LookupErr(array, "0", "q", "_id"); err == nil {
			var id any
			_ = v.Unmarshal(&id)
			return id
		}
	}
	return nil
}

func okReply(fields ...bson.E) bson.D { return append(fields, bson.E{Key: "ok", Value: 1.0}) }

func stmt(id any) bson.D {
	return bson.D{
		{Key: "q", Value: bson.D{{Key: "_id", Value: id}}},
		{Key: "u", Value: bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: int32(1)}}}}},
	}
}

// TestWriteStatementCommands checks what the backend gets for a client's
// update command of three statements, inline or in a document sequence:
// one command per statement, each with every other field of the client's
// command, in order, and no moreToCome or checksum; and what the client
// gets: one OP_MSG answering its requestID, without checksum.
func TestWriteStatementCommands(t *testing.T) {
	fields := bson.D{
		{Key: "update", Value: "coll"},
		{Key: "ordered", Value: false},
		{Key: "lsid", Value: bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}}}},
		{Key: "txnNumber", Value: int64(7)},
		{Key: "writeConcern", Value: bson.D{{Key: "w", Value: "majority"}, {Key: "wtimeout", Value: int32(100)}}},
		{Key: "bypassDocumentValidation", Value: true},
		{Key: "let", Value: bson.D{{Key: "x", Value: int32(1)}}},
		{Key: "comment", Value: "why"},
		{Key: "maxTimeMS", Value: int32(1000)},
		{Key: "$db", Value: "db"},
	}
	stmts := []bson.D{stmt(int32(1)), stmt(int32(2)), stmt(int32(3))}
	with := func(stmt bson.D) bson.D { // the fields, then updates: [stmt]
		return append(append(bson.D{}, fields...), bson.E{Key: "updates", Value: bson.A{stmt}})
	}

	for name, sections := range map[string]func(t *testing.T) [][]byte{
		"inline": func(t *testing.T) [][]byte { // updates inline, the body's last field
			return [][]byte{section0(t, append(append(bson.D{}, fields...),
				bson.E{Key: "updates", Value: bson.A{stmts[0], stmts[1], stmts[2]}}))}
		},
		"document sequence": func(t *testing.T) [][]byte {
			return [][]byte{section1(t, "updates", stmts...), section0(t, fields)}
		},
	} {
		t.Run(name, func(t *testing.T) {
			backend := newFakeBackend(t, func(bson.Raw) bson.D {
				return okReply(bson.E{Key: "n", Value: int32(1)}, bson.E{Key: "nModified", Value: int32(1)})
			})
			front := startFront(t, backend.addr())
			// With a checksum the front does not check; its reply has none.
			responseTo, flags, body := exchange(t, dial(t, front),
				opMsgRequest(42, flagChecksumPresent, append(sections(t), u32(0xdeadbeef))...))

			assert.Equal(t, int32(42), responseTo)
			assert.Zero(t, flags, "no checksum, no moreToCome")
			assert.Equal(t, bson.D{
				{Key: "n", Value: int32(3)}, {Key: "nModified", Value: int32(3)}, {Key: "ok", Value: 1.0},
			}, unmarshal(t, body))

			got := backend.received()
			require.Len(t, got, 3)
			for i, r := range got {
				assert.Zero(t, r.flags, "statement %d", i)
				assert.Empty(t, r.seqs, "statement %d is inline", i)
				assert.Equal(t, unmarshal(t, doc(t, with(stmts[i]))), unmarshal(t, r.body), "statement %d", i)
			}
			assert.Equal(t, uint64(1), front.Stats().Forwarded, "one client request")
		})
	}
}

// TestWriteDroppedFields checks the two fields the front leaves out of a
// statement command because FerretDB would refuse them where MongoDB does
// not: a comment that is not a string (update, delete) and
// bypassDocumentValidation (delete).
func TestWriteDroppedFields(t *testing.T) {
	for _, tc := range []struct {
		command, array string
		extra, kept    bson.D
	}{
		{
			command: "update", array: "updates",
			extra: bson.D{{Key: "comment", Value: bson.D{{Key: "why", Value: int32(1)}}}, {Key: "bypassDocumentValidation", Value: true}},
			kept:  bson.D{{Key: "bypassDocumentValidation", Value: true}},
		},
		{
			command: "delete", array: "deletes",
			extra: bson.D{{Key: "comment", Value: int32(5)}, {Key: "bypassDocumentValidation", Value: true}},
		},
		{
			command: "delete", array: "deletes",
			extra: bson.D{{Key: "comment", Value: "a string is kept"}},
			kept:  bson.D{{Key: "comment", Value: "a string is kept"}},
		},
		{
			command: "insert", array: "documents",
			extra: bson.D{{Key: "comment", Value: int32(5)}, {Key: "bypassDocumentValidation", Value: true}},
			kept:  bson.D{{Key: "comment", Value: int32(5)}, {Key: "bypassDocumentValidation", Value: true}},
		},
	} {
		backend := newFakeBackend(t, func(bson.Raw) bson.D { return okReply(bson.E{Key: "n", Value: int32(1)}) })
		front := startFront(t, backend.addr())
		statement := bson.D{{Key: "_id", Value: int32(1)}}
		cmd := append(append(bson.D{{Key: tc.command, Value: "coll"}}, tc.extra...), bson.E{Key: "$db", Value: "db"})
		exchange(t, dial(t, front), opMsgRequest(1, 0, section0(t, cmd), section1(t, tc.array, statement)))

		got := backend.received()
		require.Len(t, got, 1, tc.command)
		want := append(append(bson.D{{Key: tc.command, Value: "coll"}}, tc.kept...),
			bson.E{Key: "$db", Value: "db"}, bson.E{Key: tc.array, Value: bson.A{statement}})
		assert.Equal(t, unmarshal(t, doc(t, want)), unmarshal(t, got[0].body), "%s with %v", tc.command, tc.extra)
	}
}

// TestWriteReplyAssembly scripts the backend's replies to four statements
// and checks the reply the front puts together: counts summed, upserted
// and write errors under their statement's index, a later statement's
// ok: 0 as its write error, the writeConcernError passed on, the last
// reply's other fields (a replica set's $clusterTime) kept; and that an
// ordered command stops at its first write error.
func TestWriteReplyAssembly(t *testing.T) {
	clusterTime := bson.D{{Key: "clusterTime", Value: bson.Timestamp{T: 1, I: 2}}}
	wce := bson.D{{Key: "code", Value: int32(64)}, {Key: "errmsg", Value: "waiting for replication timed out"}}
	answer := func(body bson.Raw) bson.D {
		switch statementID(body) {
		case int32(0):
			return okReply(
				bson.E{Key: "n", Value: int32(1)}, bson.E{Key: "nModified", Value: int32(0)},
				bson.E{Key: "upserted", Value: bson.A{bson.D{{Key: "index", Value: int32(0)}, {Key: "_id", Value: "new"}}}},
			)
		case int32(1): // FerretDB's reply to a statement that fails: no n
			return bson.D{
				{Key: "ok", Value: 1.0},
				{Key: "writeErrors", Value: bson.A{bson.D{
					{Key: "index", Value: int32(0)}, {Key: "code", Value: int32(11000)},
					{Key: "errmsg", Value: "E11000"}, {Key: "errInfo", Value: bson.D{{Key: "k", Value: int32(1)}}},
				}}},
			}
		case int32(2):
			return bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: "bad"}, {Key: "code", Value: int32(2)}, {Key: "codeName", Value: "BadValue"}}
		default:
			return okReply(
				bson.E{Key: "n", Value: int32(1)}, bson.E{Key: "nModified", Value: int32(1)},
				bson.E{Key: "writeConcernError", Value: wce},
			)
		}
	}
	wantErrors := bson.A{
		bson.D{
			{Key: "index", Value: int32(1)}, {Key: "code", Value: int32(11000)},
			{Key: "errmsg", Value: "E11000"}, {Key: "errInfo", Value: bson.D{{Key: "k", Value: int32(1)}}},
		},
		bson.D{{Key: "index", Value: int32(2)}, {Key: "code", Value: int32(2)}, {Key: "errmsg", Value: "bad"}},
	}
	upserted := bson.A{bson.D{{Key: "index", Value: int32(0)}, {Key: "_id", Value: "new"}}}

	for _, tc := range []struct {
		ordered    bool
		statements int
		want       bson.D
	}{
		{
			ordered: false, statements: 4,
			want: bson.D{
				{Key: "n", Value: int32(2)}, {Key: "nModified", Value: int32(1)},
				{Key: "upserted", Value: upserted}, {Key: "writeErrors", Value: wantErrors},
				{Key: "writeConcernError", Value: wce}, {Key: "ok", Value: 1.0},
				{Key: "$clusterTime", Value: clusterTime},
			},
		},
		{
			ordered: true, statements: 2,
			want: bson.D{
				{Key: "n", Value: int32(1)}, {Key: "nModified", Value: int32(0)},
				{Key: "upserted", Value: upserted}, {Key: "writeErrors", Value: wantErrors[:1]},
				{Key: "ok", Value: 1.0},
			},
		},
	} {
		backend := newFakeBackend(t, func(body bson.Raw) bson.D {
			reply := answer(body)
			if statementID(body) == int32(3) {
				reply = append(reply, bson.E{Key: "$clusterTime", Value: clusterTime})
			}
			return reply
		})
		front := startFront(t, backend.addr())
		cmd := bson.D{{Key: "update", Value: "coll"}, {Key: "ordered", Value: tc.ordered}, {Key: "$db", Value: "db"}}
		_, _, body := exchange(t, dial(t, front), opMsgRequest(1, 0, section0(t, cmd),
			section1(t, "updates", stmt(int32(0)), stmt(int32(1)), stmt(int32(2)), stmt(int32(3)))))

		assert.Equal(t, unmarshal(t, doc(t, tc.want)), unmarshal(t, body), "ordered: %v", tc.ordered)
		assert.Len(t, backend.received(), tc.statements, "statements run, ordered: %v", tc.ordered)
	}
}

// TestWriteCommandError checks that an ok: 0 reply to the first statement
// is relayed as the command's error, and that no other statement runs, even
// unordered.
func TestWriteCommandError(t *testing.T) {
	refusal := bson.D{
		{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: "update: unknown field \"bogus\""},
		{Key: "code", Value: int32(9)}, {Key: "codeName", Value: "FailedToParse"},
	}
	backend := newFakeBackend(t, func(bson.Raw) bson.D { return refusal })
	front := startFront(t, backend.addr())
	cmd := bson.D{{Key: "update", Value: "coll"}, {Key: "bogus", Value: true}, {Key: "ordered", Value: false}, {Key: "$db", Value: "db"}}
	responseTo, _, body := exchange(t, dial(t, front), opMsgRequest(3, 0, section0(t, cmd),
		section1(t, "updates", stmt(int32(0)), stmt(int32(1)))))

	assert.Equal(t, int32(3), responseTo)
	assert.Equal(t, refusal, unmarshal(t, body))
	assert.Len(t, backend.received(), 1)
}

// TestWriteMoreToCome checks that an unacknowledged write command (OP_MSG
// moreToCome) runs all its statements, in order, gets no reply, and leaves
// the connection in step: the next request's reply is the first message
// the client reads.
func TestWriteMoreToCome(t *testing.T) {
	backend := newFakeBackend(t, func(bson.Raw) bson.D { return okReply(bson.E{Key: "n", Value: int32(1)}) })
	front := startFront(t, backend.addr())
	c := dial(t, front)

	cmd := bson.D{{Key: "delete", Value: "coll"}, {Key: "writeConcern", Value: bson.D{{Key: "w", Value: int32(0)}}}, {Key: "$db", Value: "db"}}
	deletes := []bson.D{
		{{Key: "q", Value: bson.D{{Key: "_id", Value: int32(1)}}}, {Key: "limit", Value: int32(1)}},
		{{Key: "q", Value: bson.D{{Key: "_id", Value: int32(2)}}}, {Key: "limit", Value: int32(1)}},
	}
	_, err := c.Write(opMsgRequest(1, flagMoreToCome, section0(t, cmd), section1(t, "deletes", deletes...)))
	require.NoError(t, err)
	responseTo, _, body := exchange(t, c, opMsgRequest(2, 0, section0(t, bson.D{{Key: "ping", Value: int32(1)}, {Key: "$db", Value: "db"}})))
	assert.Equal(t, int32(2), responseTo, "the first reply is the ping's: %s", body)

	got := backend.received()
	require.Len(t, got, 3)
	for i, r := range got[:2] {
		assert.Zero(t, r.flags, "statement %d is sent acknowledged", i)
		assert.Equal(t, int32(i+1), statementID(r.body), "statement %d in order", i)
	}
	assert.Equal(t, "ping", firstKey(got[2].body))
}

// TestForwardMoreToCome checks the same for a command forwarded as it is:
// FerretDB v1 answers a moreToCome request all the same; the front reads
// that answer and drops it, instead of leaving it to be taken for the
// answer to the client's next request.
func TestForwardMoreToCome(t *testing.T) {
	backend := newFakeBackend(t, func(body bson.Raw) bson.D {
		return okReply(bson.E{Key: "for", Value: firstKey(body)})
	})
	front := startFront(t, backend.addr())
	c := dial(t, front)

	create := bson.D{{Key: "create", Value: "coll"}, {Key: "writeConcern", Value: bson.D{{Key: "w", Value: int32(0)}}}, {Key: "$db", Value: "db"}}
	_, err := c.Write(opMsgRequest(1, flagMoreToCome|flagChecksumPresent, section0(t, create), u32(0xdeadbeef)))
	require.NoError(t, err)
	responseTo, _, body := exchange(t, c, opMsgRequest(2, 0, section0(t, bson.D{{Key: "ping", Value: int32(1)}, {Key: "$db", Value: "db"}})))
	assert.Equal(t, int32(2), responseTo)
	assert.Equal(t, "ping", body.Lookup("for").StringValue())

	got := backend.received()
	require.Len(t, got, 2)
	assert.Zero(t, got[0].flags, "sent without moreToCome and without the checksum it no longer matches")
	assert.Equal(t, unmarshal(t, doc(t, create)), unmarshal(t, got[0].body))
	assert.Equal(t, uint64(2), front.Stats().Forwarded)
}

// TestWriteForwardedAsIs checks that a write command the front does not
// take apart with confidence reaches the backend unchanged.
func TestWriteForwardedAsIs(t *testing.T) {
	backend := newFakeBackend(t, func(bson.Raw) bson.D { return okReply() })
	front := startFront(t, backend.addr())
	c := dial(t, front)

	both := bson.D{{Key: "update", Value: "coll"}, {Key: "updates", Value: bson.A{stmt(int32(1))}}, {Key: "$db", Value: "db"}}
	exchange(t, c, opMsgRequest(1, 0, section0(t, both), section1(t, "updates", stmt(int32(2)))))
	empty := bson.D{{Key: "update", Value: "coll"}, {Key: "updates", Value: bson.A{}}, {Key: "$db", Value: "db"}}
	exchange(t, c, opMsgRequest(2, 0, section0(t, empty)))

	got := backend.received()
	require.Len(t, got, 2)
	assert.Equal(t, unmarshal(t, doc(t, both)), unmarshal(t, got[0].body))
	require.Len(t, got[0].seqs, 1, "the document sequence is forwarded")
	assert.Len(t, got[0].seqs[0].docs, 1)
	assert.Equal(t, unmarshal(t, doc(t, empty)), unmarshal(t, got[1].body))
}

// TestWriteInterleavesBetweenStatements: as on MongoDB ("the modification
// of each document is atomic, but the operation as a whole is not atomic
// … other operations may interleave", manual, Atomicity and Transactions,
// https://www.mongodb.com/docs/manual/core/write-operations-atomicity/),
// another client's request lands between two statements of one write
// command: the front holds its lock per statement. Here another client's
// find, sent when the first statement is done, is answered before the
// second statement reaches the backend.
func TestWriteInterleavesBetweenStatements(t *testing.T) {
	backend := newFakeBackend(t, func(body bson.Raw) bson.D {
		if firstKey(body) == "find" {
			return okReply(bson.E{Key: "cursor", Value: bson.D{{Key: "id", Value: int64(0)}, {Key: "ns", Value: "db.coll"}, {Key: "firstBatch", Value: bson.A{}}}})
		}
		return okReply(bson.E{Key: "n", Value: int32(1)}, bson.E{Key: "nModified", Value: int32(1)})
	})
	front := startFront(t, backend.addr())
	writer, other := dial(t, front), dial(t, front)
	gaps := 0
	front.between = func(stmt, doc int) {
		gaps++
		if stmt == 1 && doc == -1 { // the first statement done, the second not sent
			_, _, body := exchange(t, other, opMsgRequest(7, 0, section0(t, bson.D{{Key: "find", Value: "coll"}, {Key: "$db", Value: "db"}})))
			assert.Equal(t, 1.0, body.Lookup("ok").Double())
		}
	}
	cmd := bson.D{{Key: "update", Value: "coll"}, {Key: "$db", Value: "db"}}
	_, _, body := exchange(t, writer, opMsgRequest(1, 0, section0(t, cmd), section1(t, "updates", stmt(int32(0)), stmt(int32(1)))))
	assert.Equal(t, int32(2), body.Lookup("n").Int32())
	assert.Equal(t, 1, gaps, "one gap between two statements")

	got := backend.received()
	require.Len(t, got, 3)
	assert.Equal(t, int32(0), statementID(got[0].body))
	assert.Equal(t, "find", firstKey(got[1].body), "the other client's find between the statements")
	assert.Equal(t, int32(1), statementID(got[2].body))
}

// TestStatementPauseIsSeeded: the pauses between statements are drawn
// below the maximum from a source seeded by FrontOptions.Seed, so a
// randomized run is repeated by its seed; none without a maximum.
func TestStatementPauseIsSeeded(t *testing.T) {
	draw := func(seed uint64) []time.Duration {
		p := newPauser(seed, time.Millisecond)
		out := make([]time.Duration, 20)
		for i := range out {
			out[i] = p.next()
			require.GreaterOrEqual(t, out[i], time.Duration(0))
			require.Less(t, out[i], time.Millisecond)
		}
		return out
	}
	assert.Equal(t, draw(7), draw(7))
	assert.NotEqual(t, draw(7), draw(8))
	assert.Nil(t, newPauser(7, 0))
	assert.Zero(t, newPauser(7, 0).next())
}

// TestHandshakeNotSerialized: while a write holds the front's lock, a
// hello or ping from another client is answered at once, as MongoDB
// answers heartbeats during a long write (see unserialized).
func TestHandshakeNotSerialized(t *testing.T) {
	held := make(chan struct{})
	release := make(chan struct{})
	backend := newFakeBackend(t, func(body bson.Raw) bson.D {
		if firstKey(body) == "update" {
			close(held)
			<-release
		}
		return okReply(bson.E{Key: "n", Value: int32(1)}, bson.E{Key: "nModified", Value: int32(1)})
	})
	front := startFront(t, backend.addr())
	writer, other := dial(t, front), dial(t, front)
	cmd := bson.D{{Key: "update", Value: "coll"}, {Key: "$db", Value: "db"}}
	_, err := writer.Write(opMsgRequest(1, 0, section0(t, cmd), section1(t, "updates", stmt(int32(0)))))
	require.NoError(t, err)
	<-held
	for i, name := range []string{"hello", "ping"} {
		responseTo, _, body := exchange(t, other, opMsgRequest(int32(i+1), 0, section0(t, bson.D{{Key: name, Value: int32(1)}, {Key: "$db", Value: "admin"}})))
		assert.Equal(t, int32(i+1), responseTo)
		assert.Equal(t, 1.0, body.Lookup("ok").Double(), "%s answered while the write holds the lock", name)
	}
	close(release)
	_, _, body := readReply(t, writer)
	assert.Equal(t, int32(1), body.Lookup("n").Int32())
}

func TestParseWriteCommand(t *testing.T) {
	body := func(fields ...bson.E) []byte {
		return section0(t, append(bson.D{{Key: "update", Value: "c"}, {Key: "$db", Value: "d"}}, fields...))
	}
	updates := bson.E{Key: "updates", Value: bson.A{stmt(int32(1)), stmt(int32(2))}}
	seq := section1(t, "updates", stmt(int32(1)), stmt(int32(2)))

	for name, tc := range map[string]struct {
		command  string
		sections [][]byte
		want     int // statements; 0: not taken apart
		ordered  bool
	}{
		"inline":                 {command: "update", sections: [][]byte{body(updates)}, want: 2, ordered: true},
		"document sequence":      {command: "update", sections: [][]byte{seq, body()}, want: 2, ordered: true},
		"unordered":              {command: "update", sections: [][]byte{body(bson.E{Key: "ordered", Value: false}), seq}, want: 2},
		"both forms":             {command: "update", sections: [][]byte{body(updates), seq}},
		"no statement":           {command: "update", sections: [][]byte{body()}},
		"empty sequence":         {command: "update", sections: [][]byte{body(), section1(t, "updates")}},
		"statement not document": {command: "update", sections: [][]byte{body(bson.E{Key: "updates", Value: bson.A{int32(1)}})}},
		"other sequence":         {command: "update", sections: [][]byte{body(updates), section1(t, "documents", stmt(int32(1)))}},
		"two bodies":             {command: "update", sections: [][]byte{body(updates), body()}},
		"not a write":            {command: "find", sections: [][]byte{body(updates)}},
		"case matters":           {command: "Update", sections: [][]byte{body(updates)}},
	} {
		var sections []byte
		for _, s := range tc.sections {
			sections = append(sections, s...)
		}
		w := parseWriteCommand(tc.command, sections)
		if tc.want == 0 {
			assert.Nil(t, w, name)
			continue
		}
		if assert.NotNil(t, w, name) {
			assert.Len(t, w.statements, tc.want, name)
			assert.Equal(t, tc.ordered, w.ordered, name)
			assert.Equal(t, "d", w.db, name)
			assert.Equal(t, "c", w.coll, name)
		}
	}
}

// TestStatementCommandMatchesMarshal: statementCommand writes the bytes
// bson.Marshal writes for the command of one statement
// (statementCommandMarshal), wherever the statements are among the
// command's fields, and fails as it does on a statement that is not BSON.
func TestStatementCommandMatchesMarshal(t *testing.T) {
	lsid := bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: make([]byte, 16)}}}
	wc := bson.D{{Key: "w", Value: "majority"}, {Key: "wtimeout", Value: int64(1000)}}
	stmts := []bson.D{
		stmt(int32(1)),
		{{Key: "q", Value: bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "state", Value: "pending"}}},
			{Key: "u", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "state", Value: "applied"}}}}},
			{Key: "upsert", Value: false}, {Key: "multi", Value: false}},
		{{Key: "_id", Value: "x"}, {Key: "a", Value: bson.A{1.5, "é", bson.D{}, bson.A{}, nil}}},
	}
	for _, command := range []string{"update", "insert", "delete"} {
		kind, _ := writeKindOf(command)
		for _, arrayAt := range []int{0, 1, 2, 5} {
			fields := bson.D{{Key: command, Value: "coll"}, {Key: "ordered", Value: true}, {Key: "lsid", Value: lsid},
				{Key: "writeConcern", Value: wc}, {Key: "$db", Value: "db"}}
			inline := append(bson.D{}, fields[:arrayAt]...)
			inline = append(inline, bson.E{Key: kind.array, Value: bson.A{stmts[0], stmts[1], stmts[2]}})
			inline = append(inline, fields[arrayAt:]...)
			for form, sections := range map[string][]byte{
				"inline":   section0(t, inline),
				"sequence": append(section0(t, fields), section1(t, kind.array, stmts...)...),
			} {
				w := parseWriteCommand(command, sections)
				require.NotNil(t, w, "%s %s %d", command, form, arrayAt)
				for i, s := range w.statements {
					want, err := w.statementCommandMarshal(s)
					require.NoError(t, err)
					got, err := w.statementCommand(s)
					require.NoError(t, err)
					assert.Equal(t, want, got, "%s %s at %d, statement %d", command, form, arrayAt, i)
					long := append(append(bson.Raw{}, s...), 1, 2, 3) // bytes past its length
					got, err = w.statementCommand(long)
					require.NoError(t, err)
					assert.Equal(t, want, got, "%s %s at %d, statement %d with bytes past its end", command, form, arrayAt, i)
				}
				for _, bad := range []bson.Raw{{5, 0, 0}, {9, 0, 0, 0, 2, 'a', 0, 0, 0}, {6, 0, 0, 0, 0x7f, 0}} {
					_, wantErr := w.statementCommandMarshal(bad)
					_, gotErr := w.statementCommand(bad)
					if wantErr == nil {
						assert.NoError(t, gotErr)
						continue
					}
					require.Error(t, gotErr)
					assert.Equal(t, wantErr.Error(), gotErr.Error())
				}
			}
		}
	}
}
