package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// printJSON writes v as the one JSON document of the command's output.
func (cl *cli) printJSON(v any) error {
	enc := json.NewEncoder(cl.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// extJSON is a document as relaxed Extended JSON: ObjectIDs as
// {"$oid": ...}, dates as {"$date": ...}, numbers as numbers.
func extJSON(doc bson.Raw) json.RawMessage {
	if doc == nil {
		return json.RawMessage("null")
	}
	b, err := bson.MarshalExtJSON(doc, false, false)
	if err != nil {
		b, _ = json.Marshal(fmt.Sprintf("unprintable document: %v", err))
	}
	return b
}

// extJSONValue is one value as relaxed Extended JSON.
func extJSONValue(v bson.RawValue) json.RawMessage {
	if v.Type == 0 {
		return json.RawMessage("null")
	}
	b, err := bson.MarshalExtJSON(bson.D{{Key: "v", Value: v}}, false, false)
	if err != nil {
		b, _ = json.Marshal(fmt.Sprintf("unprintable value: %v", err))
		return b
	}
	var wrapper struct {
		V json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(b, &wrapper); err != nil {
		return json.RawMessage("null")
	}
	return wrapper.V
}

// human is a value as human output shows it: strings as they are,
// ObjectIDs in hex, dates in UTC, documents and arrays as Extended JSON.
func human(v bson.RawValue) string {
	switch v.Type {
	case 0:
		return "-"
	case bson.TypeString:
		return v.StringValue()
	case bson.TypeInt32, bson.TypeInt64:
		n, _ := v.AsInt64OK()
		return strconv.FormatInt(n, 10)
	case bson.TypeDouble:
		return strconv.FormatFloat(v.Double(), 'g', -1, 64)
	case bson.TypeObjectID:
		return v.ObjectID().Hex()
	case bson.TypeDateTime:
		return timestamp(v.Time())
	case bson.TypeBoolean:
		return strconv.FormatBool(v.Boolean())
	case bson.TypeNull:
		return "null"
	}
	return string(extJSONValue(v))
}

// timestamp is a time as output shows it.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// age is how long ago, by the server's clock now, t was: rounded for
// reading, never negative.
func age(now, t time.Time) time.Duration {
	d := now.Sub(t)
	switch {
	case d < 0:
		return 0
	case d < time.Second:
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// seconds is a duration for JSON output.
func seconds(d time.Duration) float64 { return d.Seconds() }

// table is a tabwriter for human output; Flush it.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// plural is n and noun, plural when n is not 1.
func plural(n int64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.FormatInt(n, 10) + " " + noun + "s"
}

// printJSONLine writes v as one line of JSON, for output that is a stream
// of documents (recover --watch).
func (cl *cli) printJSONLine(v any) error {
	enc := json.NewEncoder(cl.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonDoc is a transaction document that marshals as relaxed Extended
// JSON; null if there is none.
type jsonDoc struct{ t *txnDoc }

func (d jsonDoc) MarshalJSON() ([]byte, error) {
	if d.t == nil {
		return []byte("null"), nil
	}
	return extJSON(d.t.raw), nil
}
