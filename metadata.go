package twopc

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Metadata limits (Stripe's): a transfer's metadata holds at most
// MaxMetadataKeys keys, each at most MaxMetadataKeyLen bytes, with values
// of at most MaxMetadataValueLen bytes.
const (
	MaxMetadataKeys     = 50
	MaxMetadataKeyLen   = 40
	MaxMetadataValueLen = 500
)

// WithMetadata attaches string metadata to a transfer (Transfer,
// TransferLegs, Hold, HoldLegs, Reverse): an order id, a memo. It is
// written once with the transaction, never changed, and returned by Get,
// GetByKey and the transfer's own Txn. A keyed call repeated with other
// metadata is another transfer: ErrKeyConflict. The map is copied; an
// empty map is no metadata. At most MaxMetadataKeys keys, each non-empty,
// at most MaxMetadataKeyLen bytes, valid UTF-8, not starting with "$" and
// holding no "." or NUL; values valid UTF-8 of at most
// MaxMetadataValueLen bytes. Anything else gets ErrInvalidTransfer, and
// nothing is written.
func WithMetadata(m map[string]string) TransferOption {
	return func(t *transferConfig) { t.metadata = maps.Clone(m) }
}

// AccountMetadata attaches string metadata to an account OpenAccount opens
// (its owner, its kind): written once with it, in its document's
// "metadata", returned by Account and shown by the tool, never read or
// changed by a leg write (but carried by each: every leg's statement
// rewrites the account document, so keep it small). The limits are
// WithMetadata's; anything else gets ErrInvalidAccount, and nothing is
// written. SetLimits takes no metadata (ErrInvalidAccount).
//
// Fields a user adds to an account document by hand, besides the ones the
// library writes (PROTOCOL.md, "Data model"), are allowed and left alone.
func AccountMetadata(m map[string]string) AccountOption {
	return func(c *accountConfig) { c.metadata, c.metadataSet = maps.Clone(m), true }
}

// validateMetadata checks a transfer's metadata against the limits of
// WithMetadata: ErrInvalidTransfer.
func validateMetadata(m map[string]string) error {
	if err := checkMetadata(m); err != nil {
		return errorf("%w: %w", ErrInvalidTransfer, err)
	}
	return nil
}

// checkMetadata says why metadata passes the limits of WithMetadata, or nil.
func checkMetadata(m map[string]string) error {
	if len(m) > MaxMetadataKeys {
		return errorf("metadata of %d keys, more than MaxMetadataKeys (%d)", len(m), MaxMetadataKeys)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		switch {
		case k == "":
			return errors.New("an empty metadata key")
		case len(k) > MaxMetadataKeyLen:
			return errorf("metadata key %q of %d bytes, more than MaxMetadataKeyLen (%d)", k, len(k), MaxMetadataKeyLen)
		case !utf8.ValidString(k):
			return errorf("metadata key %q is not valid UTF-8", k)
		case strings.HasPrefix(k, "$") || strings.ContainsAny(k, ".\x00"):
			return errorf("metadata key %q starts with $ or holds . or NUL", k)
		case len(v) > MaxMetadataValueLen:
			return errorf("the value of metadata key %q has %d bytes, more than MaxMetadataValueLen (%d)", k, len(v), MaxMetadataValueLen)
		case !utf8.ValidString(v):
			return errorf("the value of metadata key %q is not valid UTF-8", k)
		}
	}
	return nil
}

// metadataDoc is metadata as stored: a document with its keys in order,
// so that one transfer's insert is the same bytes every time.
func metadataDoc(m map[string]string) bson.D {
	d := make(bson.D, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		d = append(d, bson.E{Key: k, Value: m[k]})
	}
	return d
}

// decodeMetadata reads a stored metadata document; ok is false if v is not
// a document of strings.
func decodeMetadata(v bson.RawValue) (map[string]string, bool) {
	doc, ok := v.DocumentOK()
	if !ok {
		return nil, false
	}
	elems, err := doc.Elements()
	if err != nil {
		return nil, false
	}
	m := make(map[string]string, len(elems))
	for _, e := range elems {
		s, ok := stringOK(e.Value())
		if !ok {
			return nil, false
		}
		m[e.Key()] = s
	}
	return m, true
}
