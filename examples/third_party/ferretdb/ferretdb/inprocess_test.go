// twopc's dev server: this file is new (see examples/third_party/README.md).

package ferretdb_test

import (
	"context"
	"encoding/binary"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// d is a bson.D of the keys and values in kv.
func d(kv ...any) bson.D {
	out := make(bson.D, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, bson.E{Key: kv[i].(string), Value: kv[i+1]})
	}
	return out
}

// opMsg returns an OP_MSG of requestID carrying cmd.
func opMsg(t *testing.T, requestID int32, cmd bson.D) []byte {
	t.Helper()
	doc, err := bson.Marshal(cmd)
	require.NoError(t, err)
	msg := make([]byte, 16, 16+4+1+len(doc))
	msg = append(msg, 0, 0, 0, 0, 0) // flags, section kind 0
	msg = append(msg, doc...)
	binary.LittleEndian.PutUint32(msg[0:4], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[4:8], uint32(requestID))
	binary.LittleEndian.PutUint32(msg[12:16], 2013)
	return msg
}

// replyDoc returns the document of the OP_MSG reply msg to requestID.
func replyDoc(t *testing.T, requestID int32, msg []byte) bson.M {
	t.Helper()
	require.GreaterOrEqual(t, len(msg), 21)
	require.Equal(t, uint32(len(msg)), binary.LittleEndian.Uint32(msg[0:4]), "message length")
	require.Equal(t, uint32(requestID), binary.LittleEndian.Uint32(msg[8:12]), "responseTo")
	require.Equal(t, uint32(2013), binary.LittleEndian.Uint32(msg[12:16]), "opCode")
	require.Equal(t, byte(0), msg[20], "section kind")
	var doc bson.M
	require.NoError(t, bson.Unmarshal(msg[21:], &doc))
	return doc
}

// TestInProcessConn runs requests on FerretDB with no listener through
// in-process connections: a cursor read across getMore on its connection,
// the connection's end closing it, and Run's end ending every connection.
func TestInProcessConn(t *testing.T) {
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{InProcess: true},
		Logger:    slog.New(slog.DiscardHandler),
		Handler:   "sqlite",
		SQLiteURL: "file:" + t.TempDir() + "/",
	})
	require.NoError(t, err)
	assert.Empty(t, f.MongoDBURI(), "FerretDB listens nowhere")

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() {
		stop()
		<-done
	}()

	c, err := f.OpenConn(netip.MustParseAddrPort("127.0.0.1:5000"))
	require.NoError(t, err)
	run := func(c *ferretdb.Conn, id int32, cmd bson.D) bson.M {
		t.Helper()
		reply, err := c.Handle(opMsg(t, id, cmd))
		require.NoError(t, err)
		return replyDoc(t, id, reply)
	}

	res := run(c, 1, d("insert", "c", "documents", bson.A{d("_id", 1), d("_id", 2), d("_id", 3)}, "$db", "db"))
	require.EqualValues(t, 1, res["ok"], "%v", res)
	require.EqualValues(t, 3, res["n"])

	res = run(c, 2, d("find", "c", "batchSize", 1, "sort", d("_id", 1), "$db", "db"))
	require.EqualValues(t, 1, res["ok"], "%v", res)
	cursor := res["cursor"].(bson.M)
	id := cursor["id"].(int64)
	require.NotZero(t, id)
	require.Len(t, cursor["firstBatch"], 1)

	res = run(c, 3, d("getMore", id, "collection", "c", "batchSize", 1, "$db", "db"))
	require.EqualValues(t, 1, res["ok"], "getMore on the cursor's connection: %v", res)
	require.Len(t, res["cursor"].(bson.M)["nextBatch"], 1)

	res = run(c, 4, d("whatsmyuri", 1, "$db", "admin"))
	assert.Equal(t, "127.0.0.1:5000", res["you"], "the peer given to OpenConn")

	// A message FerretDB cannot read is an error, and the connection
	// goes on.
	_, err = c.Handle([]byte{1, 2, 3})
	require.Error(t, err)
	res = run(c, 5, d("ping", 1, "$db", "admin"))
	require.EqualValues(t, 1, res["ok"])

	c.Close()
	_, err = c.Handle(opMsg(t, 6, d("ping", 1, "$db", "admin")))
	require.ErrorIs(t, err, ferretdb.ErrConnClosed)

	other, err := f.OpenConn(netip.AddrPort{})
	require.NoError(t, err)
	res = run(other, 7, d("count", "c", "$db", "db"))
	require.EqualValues(t, 3, res["n"], "another connection sees the data")

	stop()
	require.NoError(t, <-done)
	done <- nil // for the deferred stop

	_, err = other.Handle(opMsg(t, 8, d("ping", 1, "$db", "admin")))
	require.ErrorIs(t, err, ferretdb.ErrConnClosed, "Run's end ends every connection")
	_, err = f.OpenConn(netip.AddrPort{})
	require.ErrorIs(t, err, ferretdb.ErrConnClosed, "no connection opens after Run's end")
}
