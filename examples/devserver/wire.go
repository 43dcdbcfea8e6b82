package devserver

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// MongoDB wire protocol constants; see
// https://www.mongodb.com/docs/manual/reference/mongodb-wire-protocol/.
const (
	headerLen     = 16       // messageLength, requestID, responseTo, opCode
	maxMessageLen = 64 << 20 // above MongoDB's 48,000,000-byte maxMessageSizeBytes

	opReply      = 1
	opQuery      = 2004
	opCompressed = 2012
	opMsg        = 2013

	flagChecksumPresent = 1 << 0
	flagMoreToCome      = 1 << 1
)

// errUnsupported marks messages the front refuses to forward.
var errUnsupported = errors.New("unsupported wire message")

// readMessage reads one whole wire protocol message: the 4-byte
// little-endian total length, then the rest.
func readMessage(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(size[:])
	if n < headerLen || n > maxMessageLen {
		return nil, fmt.Errorf("%w: message length %d", errUnsupported, n)
	}
	msg := make([]byte, n)
	copy(msg, size[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, fmt.Errorf("reading %d-byte message: %w", n, err)
	}
	return msg, nil
}

func opCode(msg []byte) int32 {
	return int32(binary.LittleEndian.Uint32(msg[12:16]))
}

// request is what the front needs to know about a client message.
type request struct {
	command      string // first key of the command document; "" if unknown
	expectsReply bool
}

// parseRequest inspects a client message read by readMessage.
func parseRequest(msg []byte) (request, error) {
	switch op := opCode(msg); op {
	case opMsg:
		flags, body, err := opMsgBody(msg)
		if err != nil {
			return request{}, err
		}
		return request{
			command:      opMsgCommand(body),
			expectsReply: flags&flagMoreToCome == 0,
		}, nil
	case opQuery:
		return request{command: opQueryCommand(msg), expectsReply: true}, nil
	case opCompressed:
		return request{}, fmt.Errorf("%w: OP_COMPRESSED (compression is not supported)", errUnsupported)
	default:
		return request{}, fmt.Errorf("%w: opCode %d", errUnsupported, op)
	}
}

// moreToCome reports whether a server reply announces further replies
// without a further request (exhaust cursors, streaming hello).
func moreToCome(msg []byte) bool {
	if opCode(msg) != opMsg {
		return false
	}
	flags, _, err := opMsgBody(msg)
	return err == nil && flags&flagMoreToCome != 0
}

// opMsgBody returns an OP_MSG's flagBits and its sections, without the
// optional trailing checksum.
func opMsgBody(msg []byte) (uint32, []byte, error) {
	if len(msg) < headerLen+4 {
		return 0, nil, fmt.Errorf("%w: OP_MSG of %d bytes", errUnsupported, len(msg))
	}
	flags := binary.LittleEndian.Uint32(msg[headerLen:])
	body := msg[headerLen+4:]
	if flags&flagChecksumPresent != 0 {
		if len(body) < 4 {
			return 0, nil, fmt.Errorf("%w: OP_MSG checksum missing", errUnsupported)
		}
		body = body[:len(body)-4]
	}
	return flags, body, nil
}

// opMsgCommand returns the first key of an OP_MSG's kind 0 section, or "" if
// the sections cannot be read.
func opMsgCommand(sections []byte) string {
	for len(sections) > 0 {
		kind := sections[0]
		sections = sections[1:]
		if len(sections) < 4 {
			return ""
		}
		if kind == 0 {
			doc, ok := document(sections)
			if !ok {
				return ""
			}
			return firstKey(doc)
		}
		n := int(binary.LittleEndian.Uint32(sections))
		if n < 4 || n > len(sections) {
			return ""
		}
		sections = sections[n:] // kind 1: size covers itself, identifier and documents
	}
	return ""
}

// opQueryCommand returns the first key of a legacy OP_QUERY's query
// document (looking inside a $query or query wrapper), or "".
func opQueryCommand(msg []byte) string {
	rest := msg[headerLen:]
	if len(rest) < 4 {
		return ""
	}
	rest = rest[4:] // flags
	end := bytes.IndexByte(rest, 0)
	if end < 0 {
		return ""
	}
	rest = rest[end+1:] // fullCollectionName
	if len(rest) < 8 {
		return ""
	}
	doc, ok := document(rest[8:]) // after numberToSkip, numberToReturn
	if !ok {
		return ""
	}
	name := firstKey(doc)
	if name == "$query" || name == "query" {
		if inner, ok := doc.Lookup(name).DocumentOK(); ok {
			return firstKey(inner)
		}
	}
	return name
}

// document returns the BSON document at the start of b, trimmed to the
// length its header gives.
func document(b []byte) (bson.Raw, bool) {
	if len(b) < 4 {
		return nil, false
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < 5 || n > len(b) {
		return nil, false
	}
	return bson.Raw(b[:n]), true
}

// firstKey returns the first key of doc, or "" if there is none.
func firstKey(doc bson.Raw) string {
	elem, err := doc.IndexErr(0)
	if err != nil {
		return ""
	}
	key, err := elem.KeyErr()
	if err != nil {
		return ""
	}
	return key
}

// ping sends {ping: 1} to the MongoDB server at addr with a raw OP_MSG and
// checks that it answers ok: 1.
func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dialing %s: %w", addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()

	cmd, err := bson.Marshal(bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}})
	if err != nil {
		return fmt.Errorf("encoding ping: %w", err)
	}
	msg := make([]byte, headerLen+4+1, headerLen+4+1+len(cmd))
	msg = append(msg, cmd...)
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[4:], 1) // requestID
	binary.LittleEndian.PutUint32(msg[12:], opMsg)
	if _, err := conn.Write(msg); err != nil {
		return fmt.Errorf("sending ping to %s: %w", addr, err)
	}

	reply, err := readMessage(conn)
	if err != nil {
		return fmt.Errorf("reading ping reply from %s: %w", addr, errors.Join(ctx.Err(), err))
	}
	if opCode(reply) != opMsg {
		return fmt.Errorf("ping reply from %s has opCode %d", addr, opCode(reply))
	}
	_, body, err := opMsgBody(reply)
	if err != nil || len(body) == 0 || body[0] != 0 {
		return fmt.Errorf("malformed ping reply from %s", addr)
	}
	doc, valid := document(body[1:])
	if !valid {
		return fmt.Errorf("malformed ping reply from %s", addr)
	}
	if ok, _ := doc.Lookup("ok").AsFloat64OK(); ok != 1 {
		return fmt.Errorf("ping to %s failed: %s", addr, doc)
	}
	return nil
}
