package devserver

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// message assembles a wire message from its opCode and body.
func message(op int32, body ...[]byte) []byte {
	msg := make([]byte, headerLen)
	for _, b := range body {
		msg = append(msg, b...)
	}
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[12:], uint32(op))
	return msg
}

func u32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }

func doc(t *testing.T, d bson.D) []byte {
	t.Helper()
	b, err := bson.Marshal(d)
	require.NoError(t, err)
	return b
}

func TestParseRequest(t *testing.T) {
	update := doc(t, bson.D{{Key: "update", Value: "c"}, {Key: "$db", Value: "d"}})
	updates := doc(t, bson.D{{Key: "q", Value: bson.D{}}})
	seq := append([]byte("updates\x00"), updates...)
	seq = append(u32(uint32(4+len(seq))), seq...)

	for name, tc := range map[string]struct {
		msg   []byte
		want  request // without write
		split bool    // whether write is set: the front runs it statement by statement
	}{
		"OP_MSG": {
			msg:  message(opMsg, u32(0), []byte{0}, update),
			want: request{command: "update", collection: "c", expectsReply: true},
		},
		"OP_MSG moreToCome": {
			msg:  message(opMsg, u32(flagMoreToCome), []byte{0}, update),
			want: request{command: "update", collection: "c", expectsReply: false},
		},
		"OP_MSG document sequence first, checksum": {
			msg:   message(opMsg, u32(flagChecksumPresent), []byte{1}, seq, []byte{0}, update, u32(0xdeadbeef)),
			want:  request{command: "update", collection: "c", expectsReply: true},
			split: true,
		},
		"OP_MSG requestID": {
			msg:  opMsgRequest(77, 0, []byte{0}, update),
			want: request{command: "update", collection: "c", expectsReply: true, requestID: 77},
		},
		"OP_MSG truncated section": {
			msg:  message(opMsg, u32(0), []byte{0}, update[:len(update)-3]),
			want: request{command: "", expectsReply: true},
		},
		"OP_QUERY": {
			msg: message(opQuery, u32(0), []byte("admin.$cmd\x00"), u32(0), u32(math.MaxUint32),
				doc(t, bson.D{{Key: "isMaster", Value: 1}})),
			want: request{command: "isMaster", expectsReply: true},
		},
		"OP_QUERY wrapped": {
			msg: message(opQuery, u32(0), []byte("admin.$cmd\x00"), u32(0), u32(math.MaxUint32),
				doc(t, bson.D{{Key: "$query", Value: bson.D{{Key: "hello", Value: 1}}}})),
			want: request{command: "hello", expectsReply: true},
		},
		"OP_QUERY truncated": {
			msg:  message(opQuery, u32(0), []byte("admin.$cmd")),
			want: request{command: "", expectsReply: true},
		},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := parseRequest(tc.msg)
			require.NoError(t, err)
			assert.Equal(t, tc.split, got.write != nil, "split")
			got.write = nil
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseRequestRefuses(t *testing.T) {
	for name, msg := range map[string][]byte{
		"OP_COMPRESSED":  message(opCompressed, u32(opMsg), u32(10), []byte{0}),
		"OP_INSERT":      message(2002, u32(0)),
		"OP_MSG no body": message(opMsg),
		"OP_MSG checksum missing": message(opMsg,
			[]byte{flagChecksumPresent, 0, 0, 0}),
	} {
		_, err := parseRequest(msg)
		assert.ErrorIs(t, err, errUnsupported, name)
	}
}

func TestReadMessage(t *testing.T) {
	msg := message(opMsg, u32(0), []byte{0}, doc(t, bson.D{{Key: "ping", Value: 1}}))
	stream := append(append([]byte{}, msg...), msg...)
	r := bytes.NewReader(stream)
	for range 2 {
		got, err := readMessage(r)
		require.NoError(t, err)
		assert.Equal(t, msg, got)
	}

	_, err := readMessage(bytes.NewReader(u32(8)))
	assert.ErrorIs(t, err, errUnsupported, "length below the header's")
	_, err = readMessage(bytes.NewReader(u32(maxMessageLen + 1)))
	assert.ErrorIs(t, err, errUnsupported, "length above the maximum")
	_, err = readMessage(bytes.NewReader(msg[:len(msg)-1]))
	assert.Error(t, err, "truncated message")
}

func TestMoreToCome(t *testing.T) {
	reply := doc(t, bson.D{{Key: "ok", Value: 1.0}})
	assert.False(t, moreToCome(message(opMsg, u32(0), []byte{0}, reply)))
	assert.True(t, moreToCome(message(opMsg, u32(flagMoreToCome), []byte{0}, reply)))
	assert.False(t, moreToCome(message(opReply, u32(0))))
}
