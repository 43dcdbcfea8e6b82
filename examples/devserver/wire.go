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
	collection   string // the command's first value if a string (the collection it names); "" if not
	expectsReply bool
	requestID    int32 // the header's requestID, which a reply's responseTo names

	// write is set for an OP_MSG update, delete or insert command the front
	// runs statement by statement (see writeCommand); nil for a message it
	// forwards as it is.
	write *writeCommand
}

// parseRequest inspects a client message read by readMessage.
func parseRequest(msg []byte) (request, error) {
	requestID := int32(binary.LittleEndian.Uint32(msg[4:8]))
	switch op := opCode(msg); op {
	case opMsg:
		flags, body, err := opMsgBody(msg)
		if err != nil {
			return request{}, err
		}
		command, collection := opMsgCommand(body)
		return request{
			command:      command,
			collection:   collection,
			expectsReply: flags&flagMoreToCome == 0,
			requestID:    requestID,
			write:        parseWriteCommand(command, body),
		}, nil
	case opQuery:
		return request{command: opQueryCommand(msg), expectsReply: true, requestID: requestID}, nil
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

// acknowledged returns a copy of the OP_MSG msg without the moreToCome flag
// (and without its checksum, which would no longer match), so that the
// server answers it. FerretDB v1 answers every request, moreToCome or not;
// MongoDB answers none that has the flag. Sending the request without it
// and dropping the answer works with both and keeps the connection in step.
func acknowledged(msg []byte) []byte {
	out := append([]byte(nil), msg...)
	flags := binary.LittleEndian.Uint32(out[headerLen:])
	if flags&flagChecksumPresent != 0 {
		out = out[:len(out)-4]
		binary.LittleEndian.PutUint32(out[0:], uint32(len(out)))
	}
	binary.LittleEndian.PutUint32(out[headerLen:], flags&^(flagMoreToCome|flagChecksumPresent))
	return out
}

// opMsgMessage returns an OP_MSG with no flags whose only section is the
// kind 0 body.
func opMsgMessage(requestID, responseTo int32, body []byte) []byte {
	msg := make([]byte, headerLen+4+1, headerLen+4+1+len(body))
	msg = append(msg, body...)
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[4:], uint32(requestID))
	binary.LittleEndian.PutUint32(msg[8:], uint32(responseTo))
	binary.LittleEndian.PutUint32(msg[12:], opMsg)
	return msg // flagBits and the section kind are already 0
}

// opMsgReply returns the body of an OP_MSG reply: its kind 0 section. It
// fails on any other message, on a malformed one and on one that announces
// further replies.
func opMsgReply(msg []byte) (bson.Raw, error) {
	if opCode(msg) != opMsg {
		return nil, fmt.Errorf("reply has opCode %d, want OP_MSG", opCode(msg))
	}
	flags, sections, err := opMsgBody(msg)
	if err != nil {
		return nil, err
	}
	if flags&flagMoreToCome != 0 {
		return nil, errors.New("reply to a write statement announces more replies")
	}
	if len(sections) == 0 || sections[0] != 0 {
		return nil, errors.New("reply has no body section")
	}
	doc, ok := document(sections[1:])
	if !ok || doc.Validate() != nil {
		return nil, errors.New("reply has a malformed body")
	}
	return doc, nil
}

// docSequence is an OP_MSG kind 1 section: a named sequence of documents
// that stands for an array field of the command.
type docSequence struct {
	id   string
	docs []bson.Raw
}

// opMsgSections splits an OP_MSG's sections into its kind 0 body and its
// kind 1 document sequences. It reports false if they are malformed or if
// there is not exactly one body.
func opMsgSections(sections []byte) (bson.Raw, []docSequence, bool) {
	var body bson.Raw
	var seqs []docSequence
	for len(sections) > 0 {
		kind := sections[0]
		sections = sections[1:]
		switch kind {
		case 0:
			doc, ok := document(sections)
			if !ok || body != nil || doc.Validate() != nil {
				return nil, nil, false
			}
			body = doc
			sections = sections[len(doc):]
		case 1:
			if len(sections) < 4 {
				return nil, nil, false
			}
			n := int(binary.LittleEndian.Uint32(sections))
			if n < 4 || n > len(sections) {
				return nil, nil, false
			}
			seq, rest := sections[4:n], sections[n:]
			end := bytes.IndexByte(seq, 0)
			if end < 0 {
				return nil, nil, false
			}
			s := docSequence{id: string(seq[:end])}
			for seq = seq[end+1:]; len(seq) > 0; {
				doc, ok := document(seq)
				if !ok || doc.Validate() != nil {
					return nil, nil, false
				}
				s.docs = append(s.docs, doc)
				seq = seq[len(doc):]
			}
			seqs = append(seqs, s)
			sections = rest
		default:
			return nil, nil, false
		}
	}
	return body, seqs, body != nil
}

// opMsgCommand returns the first key of an OP_MSG's kind 0 section (the
// command) and, if its value is a string, that value (the collection a data
// command names); "" for what the sections do not have.
func opMsgCommand(sections []byte) (command, collection string) {
	for len(sections) > 0 {
		kind := sections[0]
		sections = sections[1:]
		if len(sections) < 4 {
			return "", ""
		}
		if kind == 0 {
			doc, ok := document(sections)
			if !ok {
				return "", ""
			}
			command = firstKey(doc)
			if command != "" {
				collection, _ = doc.Index(0).Value().StringValueOK()
			}
			return command, collection
		}
		n := int(binary.LittleEndian.Uint32(sections))
		if n < 4 || n > len(sections) {
			return "", ""
		}
		sections = sections[n:] // kind 1: size covers itself, identifier and documents
	}
	return "", ""
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
	if _, err := conn.Write(opMsgMessage(1, 0, cmd)); err != nil {
		return fmt.Errorf("sending ping to %s: %w", addr, err)
	}

	reply, err := readMessage(conn)
	if err != nil {
		return fmt.Errorf("reading ping reply from %s: %w", addr, errors.Join(ctx.Err(), err))
	}
	doc, err := opMsgReply(reply)
	if err != nil {
		return fmt.Errorf("ping reply from %s: %w", addr, err)
	}
	if ok, _ := doc.Lookup("ok").AsFloat64OK(); ok != 1 {
		return fmt.Errorf("ping to %s failed: %s", addr, doc)
	}
	return nil
}
