package twopc

// Page tokens: where a statement's next page resumes.

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// entryID names an entry: its transaction and leg.
type entryID struct {
	txn bson.ObjectID
	leg int
}

// position is where a page resumes: after the entry last (keyset order),
// or, when whole, after every entry of the milliseconds up to at,
// skipping those in skip (entries an earlier page showed past at).
type position struct {
	at      time.Time
	last    entry
	reverse bool
	whole   bool
	skip    map[entryID]time.Time
}

// passed reports whether e comes at or before p in the page's direction:
// shown already.
func (p *position) passed(e *entry, reverse bool) bool {
	if _, ok := p.skip[entryID{e.Txn, e.leg}]; ok {
		return true
	}
	if p.whole {
		return !e.At.After(p.at)
	}
	c := e.compare(&p.last)
	if reverse {
		return c >= 0
	}
	return c <= 0
}

// pageToken is a position as a page token, for one account and direction.
type pageToken struct {
	Key     string      `json:"k"`
	Reverse bool        `json:"r,omitempty"`
	At      int64       `json:"t"`
	Debit   bool        `json:"d,omitempty"`
	Txn     string      `json:"x,omitempty"`
	Leg     int         `json:"l,omitempty"`
	Whole   bool        `json:"w,omitempty"`
	Skip    []skipToken `json:"s,omitempty"`
}

// skipToken is an entry a page showed past a whole position.
type skipToken struct {
	Txn string `json:"x"`
	Leg int    `json:"l"`
	At  int64  `json:"t"`
}

func (s *statement) encode(p *position) string {
	tk := pageToken{Key: s.key, Reverse: p.reverse, At: p.at.UnixMilli(), Whole: p.whole}
	if !p.whole {
		tk.Debit, tk.Txn, tk.Leg = p.last.Amount < 0, p.last.Txn.Hex(), p.last.leg
	}
	for id, at := range p.skip {
		tk.Skip = append(tk.Skip, skipToken{Txn: id.txn.Hex(), Leg: id.leg, At: at.UnixMilli()})
	}
	b, _ := json.Marshal(tk)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *statement) decode(t string, reverse bool) (*position, error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	var tk pageToken
	if err == nil {
		err = json.Unmarshal(b, &tk)
	}
	p := &position{at: time.UnixMilli(tk.At).UTC(), reverse: tk.Reverse, whole: tk.Whole}
	if err == nil && !tk.Whole {
		var id bson.ObjectID
		id, err = bson.ObjectIDFromHex(tk.Txn)
		amount := int64(1)
		if tk.Debit {
			amount = -1
		}
		p.last = entry{Entry: Entry{Txn: id, At: p.at, Amount: amount}, leg: tk.Leg}
	}
	for _, sk := range tk.Skip {
		if err != nil {
			break
		}
		var id bson.ObjectID
		if id, err = bson.ObjectIDFromHex(sk.Txn); err == nil {
			if p.skip == nil {
				p.skip = map[entryID]time.Time{}
			}
			p.skip[entryID{id, sk.Leg}] = time.UnixMilli(sk.At).UTC()
		}
	}
	switch {
	case err != nil:
		return nil, errorf("%w: page token %q does not parse", ErrInvalidQuery, t)
	case tk.Key != s.key:
		return nil, errorf("%w: page token %q is another account's", ErrInvalidQuery, t)
	case tk.Reverse != reverse:
		return nil, errorf("%w: page token %q is of the other direction (Reverse)", ErrInvalidQuery, t)
	case tk.Whole && tk.Reverse:
		return nil, errorf("%w: page token %q does not parse", ErrInvalidQuery, t)
	}
	return p, nil
}
