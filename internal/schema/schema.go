// Package schema is the document schema that the library and the twopc
// tool share, so that the tool can never disagree with the library: the
// field names of transaction and account documents, leg markers, the
// equality of ids as the server sees it, the server's clock, and asset
// codes.
package schema

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// The collections named after the transactions collection: the
// statements' checkpoints, the refund books and the change feeds
// ("transactions_checkpoints", "transactions_refunds" and
// "transactions_feeds" by default), and, on a sharded cluster, the clock
// probe ("transactions_clockprobe"): documents, one a shard, that only
// internal/clockskew writes and reads (twopc doctor shards it on
// {_id: "hashed"}; recovery, audit, statements and feeds never read it).
const (
	CheckpointsSuffix = "_checkpoints"
	RefundsSuffix     = "_refunds"
	FeedsSuffix       = "_feeds"
	ClockProbeSuffix  = "_clockprobe"
)

// Field names of transaction documents.
const (
	State         = "state"
	LastModified  = "lastModified"
	Application   = "application"
	Claim         = "claim"
	Key           = "key"
	Reason        = "reason"
	Metadata      = "metadata"    // a transfer's string metadata
	CommittedAt   = "committedAt" // the commit point, by the log server's clock
	EntryKeys     = "accounts"    // a key per account a leg is on (see statement.go)
	Opening       = "opening"     // an account's opening {balance, at}, by OpenAccount
	Lease         = "leaseMs"
	Takeover      = "takeoverMs"
	Keep          = "keepMs"
	Archive       = "archive"
	Created       = "created"
	AllowNegative = "allowNegative"
	Placeholder   = "placeholder"
	Legs          = "legs"
	Hold          = "hold"       // a hold (Coordinator.Hold)
	ExpiryMs      = "expiryMs"   // a hold's expiry, after it became held
	Captured      = "captured"   // the amount an ended hold's captures moved
	Released      = "released"   // the amount an ended hold returned to its debited accounts
	HeldAt        = "heldAt"     // when a hold became held, by the server's clock
	OnAccounts    = "onAccounts" // a held hold whose legs recovery found on their accounts
	RefundOf      = "refundOf"   // a refund's transfer (see Refund)
	// EventAt is when the transaction last moved to held, applied or
	// canceled (the moves that give it an event), by the log server's
	// clock: a change feed's membership (at or after its since).
	EventAt = "eventAt"
)

// Field names of account documents (see the root package's account.go for
// what each holds).
const (
	Balance       = "balance"
	Pending       = "pendingTransactions"
	PendingCredit = "pendingCredit"
	PendingDebit  = "pendingDebit"
	FencedBefore  = "fencedBefore"
	FencedLegs    = "fencedLegs"
	Tombstone     = "tombstone"
	Asset         = "asset"       // an account's asset code (and a two-leg transfer's, a leg's)
	Floor         = "floor"       // a limited account's lowest balance allowed
	Ceiling       = "ceiling"     // a limited account's highest balance allowed, if it has one
	FloorRoom     = "floorRoom"   // balance - floor, kept in step by every leg write
	CeilingRoom   = "ceilingRoom" // ceiling - (balance + pendingDebit + pendingCredit), the same
	LimitsSeq     = "limitsSeq"   // how many times SetLimits changed a limited account's limits
)

// Fence is the value an account's fencedLegs holds for a closed leg: the
// leg's transaction time in milliseconds since 1970 (six bytes, big-endian;
// a time before 1970 counts as 0), then the first six bytes of the SHA-256
// of the leg's marker. ObjectIDs compare by their bytes, so the fences of
// transactions older than a time t are exactly those below FenceFloor(t):
// a write that moves an account's fence line to t drops them with one
// $pull, and the line refuses their legs from then on. Two legs' fences
// are equal only if their times are the same millisecond and their digests
// agree (one chance in 2^48): the later leg is then refused, never applied
// twice.
func Fence(created time.Time, marker bson.ObjectID) bson.ObjectID {
	f := FenceFloor(created)
	sum := sha256.Sum256(marker[:])
	copy(f[6:], sum[:6])
	return f
}

// fenceTimeMax is the latest time a fence carries, in milliseconds since
// 1970 (its six bytes' largest value, in the year 10889).
const fenceTimeMax = 1<<48 - 1

// FenceFloor is the lowest fence of a transaction created at t. A time
// before 1970 counts as 1970, and one past six bytes of milliseconds as
// the last they hold: fences saturate rather than wrap, so a fence never
// sorts below an older one, and a line never drops one it does not refuse.
func FenceFloor(t time.Time) bson.ObjectID {
	var f bson.ObjectID
	ms := min(max(t.UnixMilli(), 0), fenceTimeMax)
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(ms))
	copy(f[:6], b[2:])
	return f
}

// FenceTime is the transaction time a fence carries, to the millisecond.
func FenceTime(f bson.ObjectID) time.Time {
	var b [8]byte
	copy(b[2:], f[:6])
	return time.UnixMilli(int64(binary.BigEndian.Uint64(b[:]))).UTC()
}

// Marker is the marker of leg i of transaction id: the id with its last
// byte set to i. Every transaction id the library writes ends in a zero
// byte (the root package's newTxnID and keyID), so the first leg's marker is the
// transaction's id, as in the tutorial, and no marker of one transaction
// is ever another transaction's id or marker. Markers are per leg so that
// two legs of one transfer that land on one document (ids the library took
// for two accounts and the server for one, as a collation could make them)
// never apply, settle or undo each other: each is guarded by its own.
func Marker(id bson.ObjectID, i int) bson.ObjectID {
	id[len(id)-1] = byte(i)
	return id
}

// KeyID is the _id of the transaction with idempotency key key: the
// first 11 bytes of a SHA-256 of it, and a zero last byte (the marker
// byte, see Marker). The library derives a keyed transaction's _id so
// (the _id's own uniqueness enforces the key's), and the tool finds a
// transaction by its key the same way.
func KeyID(key string) bson.ObjectID {
	sum := sha256.Sum256([]byte("twopc/key\x00" + key))
	var id bson.ObjectID
	copy(id[:len(id)-1], sum[:])
	return id
}

// TxnOfMarker is the transaction a marker belongs to.
func TxnOfMarker(m bson.ObjectID) bson.ObjectID { return Marker(m, 0) }

// SameID reports whether two ids name the same document as the server sees
// it (see CanonicalID). Ids that cannot be marshaled are never the same.
func SameID(a, b any) bool {
	ka, errA := IDKey(a)
	kb, errB := IDKey(b)
	return errA == nil && errB == nil && ka == kb
}

// IDKey is the canonical form of id, for comparing and as a map key.
func IDKey(id any) (string, error) {
	if rv, ok := id.(bson.RawValue); ok {
		return CanonicalID(rv), nil
	}
	v, err := MarshalID(id)
	if err != nil {
		return "", err
	}
	return CanonicalID(v), nil
}

// MarshalID is bson.MarshalValue(id) as a RawValue, with a string (the
// common account id, encoded on every transfer) encoded directly.
func MarshalID(id any) (bson.RawValue, error) {
	if s, ok := id.(string); ok {
		return bson.RawValue{Type: bson.TypeString, Value: bsoncore.AppendString(nil, s)}, nil
	}
	t, data, err := bson.MarshalValue(id)
	return bson.RawValue{Type: t, Value: data}, err
}

// CanonicalID encodes v so that two values have the same encoding exactly
// when the server compares them equal: numbers by value (an integral double
// in int64's range is encoded as that int64; -0.0 as 0), recursively inside
// documents (field order kept, as the server compares it) and arrays, every
// other value by its type and bytes. Values the library refuses as ids are
// encoded by type and bytes, which is never wrong for equal bytes and is
// never relied on: such ids do not pass validation.
func CanonicalID(v bson.RawValue) string {
	var b strings.Builder
	writeCanonical(&b, v)
	return b.String()
}

const (
	canonInt    = 'i'
	canonDouble = 'd'
)

// CanonicalInt reports whether canon, a CanonicalID, is a number of
// integral value: canonInt, then the int64's eight bytes, big-endian.
func CanonicalInt(canon string) bool { return len(canon) == 9 && canon[0] == canonInt }

func writeCanonical(b *strings.Builder, v bson.RawValue) {
	var num [8]byte
	switch v.Type {
	case bson.TypeInt32, bson.TypeInt64, bson.TypeDouble:
		var i int64
		isInt := true
		switch v.Type {
		case bson.TypeInt32:
			i = int64(v.Int32())
		case bson.TypeInt64:
			i = v.Int64()
		default:
			f := v.Double()
			if f == math.Trunc(f) && f >= -(1<<63) && f < 1<<63 {
				i = int64(f)
			} else {
				isInt = false
				b.WriteByte(canonDouble)
				binary.BigEndian.PutUint64(num[:], math.Float64bits(f))
				b.Write(num[:])
				return
			}
		}
		if isInt {
			b.WriteByte(canonInt)
			binary.BigEndian.PutUint64(num[:], uint64(i))
			b.Write(num[:])
		}
	case bson.TypeEmbeddedDocument, bson.TypeArray:
		b.WriteByte(byte(v.Type))
		elems, _ := bson.Raw(v.Value).Elements()
		binary.BigEndian.PutUint64(num[:], uint64(len(elems)))
		b.Write(num[:])
		for _, e := range elems {
			if v.Type == bson.TypeEmbeddedDocument {
				writeBytes(b, e.Key())
			}
			writeCanonical(b, e.Value())
		}
	default:
		b.WriteByte(byte(v.Type))
		writeBytes(b, string(v.Value))
	}
}

// writeBytes writes s length-prefixed, so that no two sequences of values
// encode alike.
func writeBytes(b *strings.Builder, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	b.Write(n[:])
	b.WriteString(s)
}

// ServerNow is the server's clock: hello's localTime, by which staleness
// and retention are judged (never the caller's clock).
func ServerNow(ctx context.Context, db *mongo.Database) (time.Time, error) {
	var hello struct {
		LocalTime time.Time `bson:"localTime"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		return time.Time{}, fmt.Errorf("server time: hello: %w", err)
	}
	if hello.LocalTime.IsZero() {
		return time.Time{}, errors.New("server time: hello has no localTime")
	}
	return hello.LocalTime, nil
}

// ValidAsset reports why code is not an asset code, or nil. An asset code
// is 1 to 32 upper-case letters, digits and _, then optionally "/N", N a
// scale of 0 to 18 written without leading zeros (twopc.AccountAsset):
// the library refuses any other, and the tool reads one by it.
func ValidAsset(code string) error {
	name, scale, scaled := strings.Cut(code, "/")
	if name == "" || len(name) > 32 {
		return fmt.Errorf("asset code %q: want 1 to 32 bytes before the scale", code)
	}
	for _, r := range name {
		if !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("asset code %q: want upper-case letters, digits and _", code)
		}
	}
	if scaled {
		n, err := strconv.Atoi(scale)
		if err != nil || n < 0 || n > 18 || strconv.Itoa(n) != scale {
			return fmt.Errorf("asset code %q: want a scale of 0 to 18 after /", code)
		}
	}
	return nil
}
