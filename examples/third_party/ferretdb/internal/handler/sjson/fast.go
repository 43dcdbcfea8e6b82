// Copyright 2021 FerretDB Inc.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package sjson

// twopc's dev server: a hand-written reader and writer of the documents
// Unmarshal and Marshal exchange with the database, in place of
// encoding/json's reflection, its intermediate map[string]json.RawMessage
// and a json.Decoder for every value.
//
// The reader (unmarshalFast) takes only the compact form Marshal writes:
// no whitespace, each object's keys once, the schema's keys spelled exactly,
// the data's keys in the schema's order. It gives up (ok false) on anything
// else, valid or not, and Unmarshal then runs the original decoder
// (unmarshalSlow), whose answer (document or error) is then the answer. So
// the reader only ever answers for data it reads as the original does, and
// every error is the original's. A string with an escape or a byte above
// ASCII that is not valid UTF-8 is unquoted by encoding/json itself.
//
// The writer (appendDocument) writes the same bytes as the original Marshal:
// each string as encoding/json writes it (HTML-safe ASCII as is, anything
// else through json.Marshal), each number with the same strconv formats.
// A value the original cannot write (a NaN or infinite double) makes
// Marshal run the original, for its error.

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/FerretDB/FerretDB/internal/types"
)

// fastReader reads the compact sjson that Marshal writes.
type fastReader struct {
	data []byte
	pos  int
}

// unmarshalFast decodes a top-level document in Marshal's form; ok is false
// if it is in any other form (see above).
func unmarshalFast(data []byte) (*types.Document, bool) {
	r := fastReader{data: data}

	if !r.literal(`{"$s":`) {
		return nil, false
	}

	sch, ok := r.schema()
	if !ok {
		return nil, false
	}

	d := new(types.Document)

	for i := 0; ; i++ {
		if r.pos >= len(r.data) {
			return nil, false
		}

		if r.data[r.pos] == '}' {
			r.pos++

			if i != len(sch.Keys) || r.pos != len(r.data) || d.Len() != len(sch.Keys) {
				return nil, false
			}

			return d, true
		}

		if r.data[r.pos] != ',' || i >= len(sch.Keys) {
			return nil, false
		}
		r.pos++

		key := sch.Keys[i]
		if key == "$s" || !r.key(key) {
			return nil, false
		}

		v, ok := r.value(sch.Properties[key])
		if !ok {
			return nil, false
		}

		d.Set(key, v)
	}
}

// literal consumes s if the data continues with it.
func (r *fastReader) literal(s string) bool {
	if len(r.data)-r.pos < len(s) || string(r.data[r.pos:r.pos+len(s)]) != s {
		return false
	}

	r.pos += len(s)

	return true
}

// key consumes the object key want and the colon after it.
func (r *fastReader) key(want string) bool {
	if raw, ok := r.plainString(); ok {
		if string(raw) != want {
			return false
		}
	} else {
		s, ok := r.string()
		if !ok || s != want {
			return false
		}
	}

	return r.literal(":")
}

// plainString consumes a string with no escape and only ASCII, returning
// its contents (not copied); if the next token is not such a string it
// consumes nothing.
func (r *fastReader) plainString() ([]byte, bool) {
	if r.pos >= len(r.data) || r.data[r.pos] != '"' {
		return nil, false
	}

	for i := r.pos + 1; i < len(r.data); i++ {
		switch c := r.data[i]; {
		case c == '"':
			raw := r.data[r.pos+1 : i]
			r.pos = i + 1

			return raw, true
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return nil, false
		}
	}

	return nil, false
}

// string consumes a string and returns its value as encoding/json unquotes it.
func (r *fastReader) string() (string, bool) {
	if raw, ok := r.plainString(); ok {
		return string(raw), true
	}

	if r.pos >= len(r.data) || r.data[r.pos] != '"' {
		return "", false
	}

	escaped := false

	for i := r.pos + 1; i < len(r.data); i++ {
		c := r.data[i]

		switch {
		case c == '\\':
			escaped = true
			i++ // the escaped byte; \uXXXX's digits are plain bytes
		case c < 0x20:
			return "", false
		case c == '"':
			tok := r.data[r.pos : i+1]

			var s string

			if escaped || !utf8.Valid(tok) {
				if err := json.Unmarshal(tok, &s); err != nil {
					return "", false
				}
			} else {
				s = string(tok[1 : len(tok)-1])
			}

			r.pos = i + 1

			return s, true
		}
	}

	return "", false
}

// number consumes a JSON number and returns its text (not copied).
func (r *fastReader) number() ([]byte, bool) {
	d := r.data
	i := r.pos

	if i < len(d) && d[i] == '-' {
		i++
	}

	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		return nil, false
	}

	if i < len(d) && d[i] == '.' {
		i++
		start := i

		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}

		if i == start {
			return nil, false
		}
	}

	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++

		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}

		start := i

		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}

		if i == start {
			return nil, false
		}
	}

	num := d[r.pos:i]
	r.pos = i

	return num, true
}

// schema consumes a schema object as Marshal writes it: {} or
// {"p":{...},"$k":[...]} (either key may come first, each once).
func (r *fastReader) schema() (*schema, bool) {
	if !r.literal("{") {
		return nil, false
	}

	sch := new(schema)

	if r.literal("}") {
		return sch, true
	}

	var seenP, seenK bool

	for {
		name, ok := r.plainString()
		if !ok || !r.literal(":") {
			return nil, false
		}

		switch string(name) {
		case "p":
			if seenP {
				return nil, false
			}

			seenP = true

			if sch.Properties, ok = r.properties(); !ok {
				return nil, false
			}

		case "$k":
			if seenK {
				return nil, false
			}

			seenK = true

			if sch.Keys, ok = r.keys(); !ok {
				return nil, false
			}

		default:
			return nil, false
		}

		if r.literal("}") {
			return sch, true
		}

		if !r.literal(",") {
			return nil, false
		}
	}
}

// properties consumes the schema's "p" object.
func (r *fastReader) properties() (map[string]*elem, bool) {
	if !r.literal("{") {
		return nil, false
	}

	props := map[string]*elem{}

	if r.literal("}") {
		return props, true
	}

	for {
		key, ok := r.string()
		if !ok || !r.literal(":") {
			return nil, false
		}

		if _, dup := props[key]; dup {
			return nil, false
		}

		e, ok := r.elem()
		if !ok {
			return nil, false
		}

		props[key] = e

		if r.literal("}") {
			return props, true
		}

		if !r.literal(",") {
			return nil, false
		}
	}
}

// keys consumes the schema's "$k" array of strings.
func (r *fastReader) keys() ([]string, bool) {
	if !r.literal("[") {
		return nil, false
	}

	keys := []string{}

	if r.literal("]") {
		return keys, true
	}

	for {
		k, ok := r.string()
		if !ok {
			return nil, false
		}

		keys = append(keys, k)

		if r.literal("]") {
			return keys, true
		}

		if !r.literal(",") {
			return nil, false
		}
	}
}

// elemTypes are the schema's types, to use the constants' strings.
var elemTypes = []elemType{
	elemTypeObject, elemTypeArray, elemTypeDouble, elemTypeString, elemTypeBinData, elemTypeObjectID,
	elemTypeBool, elemTypeDate, elemTypeNull, elemTypeRegex, elemTypeInt, elemTypeTimestamp, elemTypeLong,
}

// elem consumes a schema element: an object of "t" and, as the type needs,
// "$s", "o", "i" or "s", each once.
func (r *fastReader) elem() (*elem, bool) {
	if !r.literal("{") {
		return nil, false
	}

	e := new(elem)

	if r.literal("}") {
		return e, true
	}

	var seenT, seenS, seenO, seenI, seenSub bool

	for {
		name, ok := r.plainString()
		if !ok || !r.literal(":") {
			return nil, false
		}

		switch string(name) {
		case "t":
			if seenT {
				return nil, false
			}

			seenT = true

			raw, ok := r.plainString()
			if !ok {
				return nil, false
			}

			known := false

			for _, t := range elemTypes {
				if string(raw) == string(t) {
					e.Type = t
					known = true

					break
				}
			}

			if !known {
				e.Type = elemType(string(raw))
			}

		case "$s":
			if seenS {
				return nil, false
			}

			seenS = true

			if e.Schema, ok = r.schema(); !ok {
				return nil, false
			}

		case "o":
			if seenO {
				return nil, false
			}

			seenO = true

			s, ok := r.string()
			if !ok {
				return nil, false
			}

			e.Options = &s

		case "i":
			if seenI {
				return nil, false
			}

			seenI = true

			if !r.literal("[") {
				return nil, false
			}

			e.Items = []*elem{}

			if !r.literal("]") {
				for {
					item, ok := r.elem()
					if !ok {
						return nil, false
					}

					e.Items = append(e.Items, item)

					if r.literal("]") {
						break
					}

					if !r.literal(",") {
						return nil, false
					}
				}
			}

		case "s":
			if seenSub {
				return nil, false
			}

			seenSub = true

			num, ok := r.number()
			if !ok {
				return nil, false
			}

			n, err := strconv.ParseUint(string(num), 10, 8)
			if err != nil {
				return nil, false
			}

			st := types.BinarySubtype(n)
			e.Subtype = &st

		default:
			return nil, false
		}

		if r.literal("}") {
			return e, true
		}

		if !r.literal(",") {
			return nil, false
		}
	}
}

// value consumes a value of the given schema and returns it as
// unmarshalSingleValue does.
func (r *fastReader) value(sch *elem) (any, bool) {
	if r.literal("null") {
		return types.Null, true
	}

	if sch == nil {
		return nil, false
	}

	switch sch.Type {
	case elemTypeObject:
		if sch.Schema == nil {
			return nil, false
		}

		return r.document(sch.Schema)

	case elemTypeArray:
		if sch.Items == nil || !r.literal("[") {
			return nil, false
		}

		a := types.MakeArray(len(sch.Items))

		if r.literal("]") {
			if len(sch.Items) != 0 {
				return nil, false
			}

			return a, true
		}

		for i := 0; ; i++ {
			if i >= len(sch.Items) {
				return nil, false
			}

			v, ok := r.value(sch.Items[i])
			if !ok {
				return nil, false
			}

			a.Append(v)

			if r.literal("]") {
				if i+1 != len(sch.Items) {
					return nil, false
				}

				return a, true
			}

			if !r.literal(",") {
				return nil, false
			}
		}

	case elemTypeDouble:
		num, ok := r.number()
		if !ok {
			return nil, false
		}

		f, err := strconv.ParseFloat(string(num), 64)
		if err != nil {
			return nil, false
		}

		return f, true

	case elemTypeString:
		return r.string()

	case elemTypeBinData:
		s, ok := r.string()
		if !ok || sch.Subtype == nil {
			return nil, false
		}

		b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))

		n, err := base64.StdEncoding.Decode(b, []byte(s))
		if err != nil {
			return nil, false
		}

		return types.Binary{B: b[:n], Subtype: *sch.Subtype}, true

	case elemTypeObjectID:
		raw, ok := r.plainString()
		if !ok || hex.DecodedLen(len(raw)) != types.ObjectIDLen || len(raw)%2 != 0 {
			return nil, false
		}

		var id types.ObjectID
		if _, err := hex.Decode(id[:], raw); err != nil {
			return nil, false
		}

		return id, true

	case elemTypeBool:
		if r.literal("true") {
			return true, true
		}

		if r.literal("false") {
			return false, true
		}

		return nil, false

	case elemTypeDate:
		num, ok := r.number()
		if !ok {
			return nil, false
		}

		n, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			return nil, false
		}

		return time.UnixMilli(n), true

	case elemTypeRegex:
		s, ok := r.string()
		if !ok || sch.Options == nil {
			return nil, false
		}

		return types.Regex{Pattern: s, Options: *sch.Options}, true

	case elemTypeInt:
		num, ok := r.number()
		if !ok {
			return nil, false
		}

		n, err := strconv.ParseInt(string(num), 10, 32)
		if err != nil {
			return nil, false
		}

		return int32(n), true

	case elemTypeTimestamp:
		num, ok := r.number()
		if !ok {
			return nil, false
		}

		n, err := strconv.ParseUint(string(num), 10, 64)
		if err != nil {
			return nil, false
		}

		return types.Timestamp(n), true

	case elemTypeLong:
		num, ok := r.number()
		if !ok {
			return nil, false
		}

		n, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil {
			return nil, false
		}

		return n, true

	default: // elemTypeNull with data that is not null, or an unknown type
		return nil, false
	}
}

// document consumes a nested document of the given schema, as
// documentType.UnmarshalJSONWithSchema reads it.
func (r *fastReader) document(sch *schema) (*types.Document, bool) {
	if !r.literal("{") {
		return nil, false
	}

	d := new(types.Document)

	if r.literal("}") {
		return d, true
	}

	for i := 0; ; i++ {
		if i >= len(sch.Keys) {
			return nil, false
		}

		key := sch.Keys[i]
		if !r.key(key) {
			return nil, false
		}

		v, ok := r.value(sch.Properties[key])
		if !ok {
			return nil, false
		}

		d.Set(key, v)

		if r.literal("}") {
			if i+1 != len(sch.Keys) || d.Len() != len(sch.Keys) {
				return nil, false
			}

			return d, true
		}

		if !r.literal(",") {
			return nil, false
		}
	}
}

// appendDocument appends the top-level document as Marshal writes it; ok
// is false if it holds a value Marshal fails on (a NaN or an infinity).
func appendDocument(buf []byte, d *types.Document) ([]byte, bool) {
	buf = append(buf, `{"$s":`...)
	buf = appendSchema(buf, d)

	keys := d.Keys()
	values := d.Values()

	for i, key := range keys {
		buf = append(buf, ',', '"')
		buf = append(buf, key...) // as the original Marshal writes the top-level keys: unescaped
		buf = append(buf, '"', ':')

		var ok bool
		if buf, ok = appendValue(buf, values[i]); !ok {
			return nil, false
		}
	}

	return append(buf, '}'), true
}

// appendSchema appends the schema of d as marshalSchemaForDoc writes it.
func appendSchema(buf []byte, d *types.Document) []byte {
	keys := d.Keys()
	if len(keys) == 0 {
		return append(buf, "{}"...)
	}

	values := d.Values()

	buf = append(buf, `{"p":{`...)

	for i, key := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}

		buf = appendString(buf, key)
		buf = append(buf, ':')
		buf = appendElem(buf, values[i])
	}

	buf = append(buf, `},"$k":[`...)

	for i, key := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}

		buf = appendString(buf, key)
	}

	return append(buf, "]}"...)
}

// appendElem appends the schema element of v as marshalElemForSingleValue
// writes it.
func appendElem(buf []byte, v any) []byte {
	switch v := v.(type) {
	case *types.Document:
		buf = append(buf, `{"t":"object","$s":`...)
		buf = appendSchema(buf, v)

		return append(buf, '}')

	case *types.Array:
		buf = append(buf, `{"t":"array","i":[`...)

		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				buf = append(buf, ',')
			}

			el, _ := v.Get(i)
			buf = appendElem(buf, el)
		}

		return append(buf, "]}"...)

	case float64:
		return append(buf, `{"t":"double"}`...)
	case string:
		return append(buf, `{"t":"string"}`...)
	case types.Binary:
		buf = append(buf, `{"t":"binData","s":`...)
		buf = strconv.AppendUint(buf, uint64(v.Subtype), 10)

		return append(buf, '}')
	case types.ObjectID:
		return append(buf, `{"t":"objectId"}`...)
	case bool:
		return append(buf, `{"t":"bool"}`...)
	case time.Time:
		return append(buf, `{"t":"date"}`...)
	case types.NullType:
		return append(buf, `{"t":"null"}`...)
	case types.Regex:
		buf = append(buf, `{"t":"regex","o":`...)
		buf = appendString(buf, v.Options)

		return append(buf, '}')
	case int32:
		return append(buf, `{"t":"int"}`...)
	case types.Timestamp:
		return append(buf, `{"t":"timestamp"}`...)
	case int64:
		return append(buf, `{"t":"long"}`...)
	}

	// the original panics here; let it
	must, _ := marshalElemForSingleValue(v)

	return append(buf, must...)
}

// appendValue appends v as MarshalSingleValue writes it; ok is false if
// that fails.
func appendValue(buf []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case *types.Document:
		buf = append(buf, '{')

		keys := v.Keys()
		values := v.Values()

		for i, key := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}

			buf = appendString(buf, key)
			buf = append(buf, ':')

			var ok bool
			if buf, ok = appendValue(buf, values[i]); !ok {
				return nil, false
			}
		}

		return append(buf, '}'), true

	case *types.Array:
		buf = append(buf, '[')

		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				buf = append(buf, ',')
			}

			el, _ := v.Get(i)

			var ok bool
			if buf, ok = appendValue(buf, el); !ok {
				return nil, false
			}
		}

		return append(buf, ']'), true

	case float64:
		return appendFloat(buf, v)
	case string:
		return appendString(buf, v), true
	case types.Binary:
		if v.B == nil {
			return append(buf, "null"...), true // as json.Marshal writes a nil []byte
		}

		buf = append(buf, '"')
		buf = base64.StdEncoding.AppendEncode(buf, v.B)

		return append(buf, '"'), true
	case types.ObjectID:
		buf = append(buf, '"')
		buf = hex.AppendEncode(buf, v[:])

		return append(buf, '"'), true
	case bool:
		return strconv.AppendBool(buf, v), true
	case time.Time:
		return strconv.AppendInt(buf, v.UnixMilli(), 10), true
	case types.NullType:
		return append(buf, "null"...), true
	case types.Regex:
		return appendString(buf, v.Pattern), true
	case int32:
		return strconv.AppendInt(buf, int64(v), 10), true
	case types.Timestamp:
		return strconv.AppendUint(buf, uint64(v), 10), true
	case int64:
		return strconv.AppendInt(buf, v, 10), true
	}

	return nil, false
}

// appendFloat appends f as encoding/json writes a float64; ok is false for
// a NaN or an infinity, which it refuses.
func appendFloat(buf []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, false
	}

	abs := math.Abs(f)
	format := byte('f')

	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}

	start := len(buf)
	buf = strconv.AppendFloat(buf, f, format, -1, 64)

	if format == 'e' {
		// clean up e-09 to e-9
		b := buf[start:]
		n := len(b)

		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			buf = buf[:len(buf)-1]
		}
	}

	return buf, true
}

// appendString appends s quoted as json.Marshal writes it.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string never fails

			return append(buf, b...)
		}
	}

	buf = append(buf, '"')
	buf = append(buf, s...)

	return append(buf, '"')
}
