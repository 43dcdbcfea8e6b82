package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// printJSON writes v as the one JSON document of the command's output.
func (cl *cli) printJSON(v any) error {
	cl.wroteJSON = true
	enc := json.NewEncoder(cl.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// plainJSON is a document as plain JSON, for scripts: ObjectIDs as their
// 24 hexadecimal digits, dates as RFC 3339 strings (UTC, to the
// millisecond the server keeps), numbers as numbers, the fields in their
// stored order; see plainValue for the rarer types.
func plainJSON(doc bson.Raw) json.RawMessage {
	if doc == nil {
		return json.RawMessage("null")
	}
	var b bytes.Buffer
	writePlain(&b, bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc})
	return b.Bytes()
}

// plainValue is one value as plain JSON: a missing value is null.
func plainValue(v bson.RawValue) json.RawMessage {
	var b bytes.Buffer
	writePlain(&b, v)
	return b.Bytes()
}

// writePlain writes v as plain JSON. Besides the common types: a double
// that is not finite, a Decimal128 that is not a JSON number, a regular
// expression (/pattern/options), JavaScript, a symbol, MinKey and MaxKey
// are strings; binary data is base64; a timestamp is {"t": seconds, "i":
// increment}; undefined is null. A document that cannot be read is a
// string saying so.
func writePlain(b *bytes.Buffer, v bson.RawValue) {
	switch v.Type {
	case 0, bson.TypeNull, bson.TypeUndefined:
		b.WriteString("null")
	case bson.TypeEmbeddedDocument, bson.TypeArray:
		elems, err := bson.Raw(v.Value).Elements()
		if err != nil {
			writeString(b, fmt.Sprintf("unreadable %s: %v", v.Type, err))
			return
		}
		open, end := byte('{'), byte('}')
		if v.Type == bson.TypeArray {
			open, end = '[', ']'
		}
		b.WriteByte(open)
		for i, e := range elems {
			if i > 0 {
				b.WriteByte(',')
			}
			if v.Type == bson.TypeEmbeddedDocument {
				writeString(b, e.Key())
				b.WriteByte(':')
			}
			writePlain(b, e.Value())
		}
		b.WriteByte(end)
	case bson.TypeString:
		writeString(b, v.StringValue())
	case bson.TypeObjectID:
		writeString(b, v.ObjectID().Hex())
	case bson.TypeDateTime:
		writeString(b, v.Time().UTC().Format(time.RFC3339Nano))
	case bson.TypeInt32:
		b.WriteString(strconv.FormatInt(int64(v.Int32()), 10))
	case bson.TypeInt64:
		b.WriteString(strconv.FormatInt(v.Int64(), 10))
	case bson.TypeDouble:
		f := v.Double()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			writeString(b, strconv.FormatFloat(f, 'g', -1, 64))
			return
		}
		n, _ := json.Marshal(f)
		b.Write(n)
	case bson.TypeDecimal128:
		d := v.Decimal128().String()
		if json.Valid([]byte(d)) {
			b.WriteString(d)
		} else {
			writeString(b, d)
		}
	case bson.TypeBoolean:
		b.WriteString(strconv.FormatBool(v.Boolean()))
	case bson.TypeBinary:
		_, data := v.Binary()
		writeString(b, base64.StdEncoding.EncodeToString(data))
	case bson.TypeRegex:
		pattern, options := v.Regex()
		writeString(b, "/"+pattern+"/"+options)
	case bson.TypeJavaScript:
		writeString(b, v.JavaScript())
	case bson.TypeSymbol:
		writeString(b, v.Symbol())
	case bson.TypeCodeWithScope:
		code, _ := v.CodeWithScope()
		writeString(b, code)
	case bson.TypeTimestamp:
		t, i := v.Timestamp()
		fmt.Fprintf(b, `{"t":%d,"i":%d}`, t, i)
	case bson.TypeDBPointer:
		ns, id := v.DBPointer()
		fmt.Fprintf(b, `{"ref":%s,"id":%q}`, quote(ns), id.Hex())
	case bson.TypeMinKey:
		writeString(b, "MinKey")
	case bson.TypeMaxKey:
		writeString(b, "MaxKey")
	default:
		writeString(b, fmt.Sprintf("unprintable value of BSON type %s", v.Type))
	}
}

// writeString writes s as a JSON string, leaving <, > and & as they are.
func writeString(b *bytes.Buffer, s string) { b.WriteString(quote(s)) }

// quote is s as a JSON string.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// human is a value as human output shows it: strings as they are,
// ObjectIDs in hex, dates in UTC, documents and arrays as plain JSON.
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
	return string(plainValue(v))
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

// series is items as a sentence lists them, the last two joined by conj
// ("and", "or"): "a", "a or b", "a, b or c"; "" for none.
func series(items []string, conj string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + conj + " " + items[len(items)-1]
}

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
	cl.wroteJSON = true
	enc := json.NewEncoder(cl.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonDoc is a transaction document that marshals as plain JSON (see
// plainJSON); null if there is none.
type jsonDoc struct{ t *txnDoc }

func (d jsonDoc) MarshalJSON() ([]byte, error) {
	if d.t == nil {
		return []byte("null"), nil
	}
	return plainJSON(d.t.raw), nil
}

// scaled is amount n of asset code as people read it: with the scale the
// code gives ("USD/2": 1250 is "12.50 USD/2"), followed by the code; a
// plain integer for no asset. plus prefixes a non-negative amount with +.
func scaled(n int64, code string, plus bool) string {
	sign := ""
	switch {
	case n < 0:
		sign = "-"
	case plus:
		sign = "+"
	}
	if code == "" {
		return sign + strconv.FormatUint(absInt64(n), 10)
	}
	_, s, _ := strings.Cut(code, "/")
	scale, _ := strconv.Atoi(s)
	digits := strconv.FormatUint(absInt64(n), 10)
	if scale > 0 {
		if len(digits) <= scale {
			digits = strings.Repeat("0", scale-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-scale] + "." + digits[len(digits)-scale:]
	}
	return sign + digits + " " + code
}

// absInt64 is |n|, MinInt64 included.
func absInt64(n int64) uint64 {
	if n < 0 {
		return uint64(-(n + 1)) + 1
	}
	return uint64(n)
}
