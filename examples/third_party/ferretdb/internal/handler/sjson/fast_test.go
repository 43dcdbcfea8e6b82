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

// twopc's dev server: checks that the hand-written reader and writer
// (fast.go) answer as FerretDB's original Unmarshal and Marshal do.

import (
	"fmt"
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/FerretDB/FerretDB/internal/types"
	"github.com/FerretDB/FerretDB/internal/util/must"
)

// fastTestValues are the values of the package's test cases, and more.
func fastTestValues() []any {
	var values []any

	for _, tcs := range [][]testCase{
		arrayTestCases, binaryTestCases, boolTestCases, dateTimeTestCases, documentTestCases, doubleTestCases,
		int32TestCases, int64TestCases, objectIDTestCases, regexTestCases, stringTestCases, timestampTestCases,
	} {
		for _, tc := range tcs {
			if tc.v != nil && tc.jErr == "" {
				values = append(values, fromSJSON(tc.v))
			}
		}
	}

	values = append(values,
		"", "<a&b>", "é", "\u2028\u2029", "a\"b\\c", "tab\tnew\nline\x01", "\xff\xfe", "\U0001F600",
		0.0, math.Copysign(0, -1), 1e-7, 1e-6, 1e20, 1e21, 5e-324, math.MaxFloat64, -1.5, 123456789.125,
		math.NaN(), math.Inf(1),
		int32(math.MinInt32), int32(math.MaxInt32), int64(math.MinInt64), int64(math.MaxInt64),
		types.Timestamp(math.MaxUint64), types.Timestamp(0),
		time.UnixMilli(-62135596800000), time.UnixMilli(1700000000123),
		types.Binary{}, types.Binary{B: []byte{}}, types.Binary{B: []byte{0, 1, 2, 255}, Subtype: types.BinaryUUID},
		types.Binary{B: []byte("x"), Subtype: 0x80},
		types.Regex{Pattern: "^a<b", Options: "im"}, types.Regex{Pattern: "", Options: ""},
		types.NewObjectID(), types.Null, true, false,
		new(types.Document), new(types.Array),
		must.NotFail(types.NewArray(new(types.Array), new(types.Document), types.Null)),
	)

	return values
}

// randomValue returns a random value, nested to at most depth.
func randomValue(r *rand.Rand, depth int) any {
	n := 13
	if depth <= 0 {
		n = 11
	}

	switch r.Intn(n) {
	case 0:
		return r.NormFloat64() * math.Pow(10, float64(r.Intn(60)-30))
	case 1:
		const chars = "ab<>&\"\\\x00\x1f\u00e9\xff /\u2028"

		b := make([]byte, r.Intn(12))
		for i := range b {
			b[i] = chars[r.Intn(len(chars))]
		}

		return string(b)
	case 2:
		b := make([]byte, r.Intn(10))
		r.Read(b)

		return types.Binary{B: b, Subtype: types.BinarySubtype(r.Intn(256))}
	case 3:
		var id types.ObjectID
		r.Read(id[:])

		return id
	case 4:
		return r.Intn(2) == 0
	case 5:
		return time.UnixMilli(r.Int63n(1<<45) - 1<<44)
	case 6:
		return types.Null
	case 7:
		return types.Regex{Pattern: fmt.Sprint(r.Int()), Options: "<i>"[:r.Intn(3)]}
	case 8:
		return int32(r.Uint32())
	case 9:
		return types.Timestamp(r.Uint64())
	case 10:
		return int64(r.Uint64())
	case 11:
		d := new(types.Document)
		for i := r.Intn(4); i > 0; i-- {
			d.Set(fmt.Sprintf("k%d<é>", r.Intn(6)), randomValue(r, depth-1))
		}

		return d
	default:
		a := new(types.Array)
		for i := r.Intn(4); i > 0; i-- {
			a.Append(randomValue(r, depth-1))
		}

		return a
	}
}

// fastTestDocuments are top-level documents holding the values.
func fastTestDocuments(t testing.TB) []*types.Document {
	var docs []*types.Document

	for _, v := range fastTestValues() {
		docs = append(docs,
			must.NotFail(types.NewDocument("_id", types.NewObjectID(), "v", v)),
			must.NotFail(types.NewDocument("a", must.NotFail(types.NewDocument("b", v, "c", int64(1))))),
			must.NotFail(types.NewDocument("a", must.NotFail(types.NewArray(v, v)))),
		)
	}

	r := rand.New(rand.NewSource(1))

	for range 2000 {
		d := new(types.Document)
		for i := r.Intn(8); i > 0; i-- {
			d.Set(fmt.Sprintf("f%d", r.Intn(10)), randomValue(r, 3))
		}

		docs = append(docs, d)
	}

	return docs
}

// TestFastMarshalUnmarshal checks that Marshal writes what the original
// writes, and that the fast reader reads it as the original does.
func TestFastMarshalUnmarshal(t *testing.T) {
	t.Parallel()

	var fast int

	for i, d := range fastTestDocuments(t) {
		expected, expectedErr := marshalSlow(d)
		actual, actualErr := Marshal(d)

		if expectedErr != nil {
			require.Error(t, actualErr, "%d", i)
			assert.Equal(t, expectedErr.Error(), actualErr.Error(), "%d", i)

			continue
		}

		require.NoError(t, actualErr, "%d", i)
		require.Equal(t, string(expected), string(actual), "%d", i)

		expectedDoc, err := unmarshalSlow(expected)
		require.NoError(t, err, "%d: %s", i, expected)

		actualDoc, ok := unmarshalFast(expected)
		require.True(t, ok, "%d: %s", i, expected)
		require.Equal(t, expectedDoc, actualDoc, "%d: %s", i, expected)

		fast++
	}

	assert.Greater(t, fast, 2000)
}

// TestFastMarshalSingleValue checks that MarshalSingleValue writes what the
// original (the value's MarshalJSON) writes.
func TestFastMarshalSingleValue(t *testing.T) {
	t.Parallel()

	values := fastTestValues()

	r := rand.New(rand.NewSource(2))
	for range 2000 {
		values = append(values, randomValue(r, 3))
	}

	for i, v := range values {
		expected, expectedErr := toSJSON(v).MarshalJSON()
		actual, actualErr := MarshalSingleValue(v)

		if expectedErr != nil {
			require.Error(t, actualErr, "%d", i)
			continue
		}

		require.NoError(t, actualErr, "%d", i)
		require.Equal(t, string(expected), string(actual), "%d", i)
	}
}

// checkFastUnmarshal checks that Unmarshal answers as the original does for
// data, and that the fast reader answers only when the original succeeds,
// and the same.
func checkFastUnmarshal(t *testing.T, data []byte) {
	t.Helper()

	expected, expectedErr := unmarshalSlow(data)

	actual, ok := unmarshalFast(data)
	if ok {
		require.NoError(t, expectedErr, "%s", data)
		require.Equal(t, expected, actual, "%s", data)
	}

	actual, actualErr := Unmarshal(data)
	if expectedErr != nil {
		require.Error(t, actualErr)
		require.Equal(t, expectedErr.Error(), actualErr.Error())

		return
	}

	require.NoError(t, actualErr)
	require.Equal(t, expected, actual)
}

// TestFastUnmarshalOtherForms checks data in other forms than Marshal's,
// which the original reads or refuses.
func TestFastUnmarshalOtherForms(t *testing.T) {
	t.Parallel()

	for _, s := range fastUnmarshalSeeds() {
		checkFastUnmarshal(t, []byte(s))
	}
}

// fastUnmarshalSeeds are data in Marshal's form and others.
func fastUnmarshalSeeds() []string {
	return []string{
		`{"$s":{}}`,
		` {"$s":{}}`,
		`{"$s":{}} `,
		`{"$s":{},"a":1}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":1}`,
		`{"$s":{"$k":["a"],"p":{"a":{"t":"int"}}},"a":1}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":1.0}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":2147483648}`,
		`{"$s":{"p":{"a":{"t":"long"}},"$k":["a"]},"a":-0}`,
		`{"$s":{"p":{"a":{"t":"double"}},"$k":["a"]},"a":1e400}`,
		`{"$s":{"p":{"a":{"t":"double"}},"$k":["a"]},"a":01}`,
		`{"$s":{"p":{"a":{"t":"timestamp"}},"$k":["a"]},"a":-1}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":null}`,
		`{"$s":{"p":{"a":{"t":"nosuch"}},"$k":["a"]},"a":null}`,
		`{"$s":{"p":{"a":{"t":"nosuch"}},"$k":["a"]},"a":1}`,
		`{"$s":{"p":{"a":{"t":"null"}},"$k":["a"]},"a":1}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a","a"]},"a":1,"a":2}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":1,"a":2}`,
		`{"$s":{"p":{"a":{"t":"int"},"a":{"t":"string"}},"$k":["a"]},"a":1}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["$s"]},"$s":1}`,
		`{"$s":{"P":{"a":{"t":"int"}},"$k":["a"]},"a":1}`,
		`{"$s":{"p":{"a":{"T":"int"}},"$k":["a"]},"a":1}`,
		`{"$s":{"p":{"a":{"t":"string"}},"$k":["a"]},"a":"\u00e9\ud800"}`,
		`{"$s":{"p":{"a":{"t":"string"}},"$k":["a"]},"a":"` + "\xff" + `"}`,
		`{"$s":{"p":{"a":{"t":"string"}},"$k":["a"]},"a":"` + "\x01" + `"}`,
		`{"$s":{"p":{"\u0061":{"t":"string"}},"$k":["a"]},"\u0061":"x"}`,
		`{"$s":{"p":{"a":{"t":"objectId"}},"$k":["a"]},"a":"0102030405060708090a0b0c"}`,
		`{"$s":{"p":{"a":{"t":"objectId"}},"$k":["a"]},"a":"0102030405060708090A0B0C"}`,
		`{"$s":{"p":{"a":{"t":"objectId"}},"$k":["a"]},"a":"0102030405060708090a0b"}`,
		`{"$s":{"p":{"a":{"t":"binData"}},"$k":["a"]},"a":"AQI="}`,
		`{"$s":{"p":{"a":{"t":"binData","s":256}},"$k":["a"]},"a":"AQI="}`,
		`{"$s":{"p":{"a":{"t":"binData","s":4}},"$k":["a"]},"a":"AQI"}`,
		`{"$s":{"p":{"a":{"t":"binData","s":4}},"$k":["a"]},"a":"AQ\nI="}`,
		`{"$s":{"p":{"a":{"t":"regex"}},"$k":["a"]},"a":"x"}`,
		`{"$s":{"p":{"a":{"t":"regex","o":"i"}},"$k":["a"]},"a":"x"}`,
		`{"$s":{"p":{"a":{"t":"array","i":[]}},"$k":["a"]},"a":[]}`,
		`{"$s":{"p":{"a":{"t":"array"}},"$k":["a"]},"a":[]}`,
		`{"$s":{"p":{"a":{"t":"array","i":[{"t":"int"}]}},"$k":["a"]},"a":[]}`,
		`{"$s":{"p":{"a":{"t":"array","i":[{"t":"int"}]}},"$k":["a"]},"a":[1,2]}`,
		`{"$s":{"p":{"a":{"t":"object","$s":{"p":{"b":{"t":"int"}},"$k":["b"]}}},"$k":["a"]},"a":{}}`,
		`{"$s":{"p":{"a":{"t":"object","$s":{}}},"$k":["a"]},"a":{"b":1}}`,
		`{"$s":{"p":{"a":{"t":"object"}},"$k":["a"]},"a":{}}`,
		`{"$s":{"p":{"a":{"t":"object","$s":{"p":{"b":{"t":"int"}},"$k":["b","b"]}}},"$k":["a"]},"a":{"b":1,"b":2}}`,
		`{"$s":{"p":{"a":{"t":"bool"}},"$k":["a"]},"a":true}`,
		`{"$s":{"p":{"a":{"t":"bool"}},"$k":["a"]},"a":tru}`,
		`{"$s":{"p":{"a":{"t":"date"}},"$k":["a"]},"a":-1}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"b":1}`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]},"a":1}x`,
		`{"$s":{"p":{"a":{"t":"int"}},"$k":["a"]}}`,
		`"foo"`,
		`{}`,
		``,
	}
}

// FuzzUnmarshal checks that the fast reader answers only for data the
// original reads, and the same; and that Unmarshal answers as the original.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range fastUnmarshalSeeds() {
		f.Add([]byte(s))
	}

	for _, d := range fastTestDocuments(f)[:200] {
		if b, err := marshalSlow(d); err == nil {
			f.Add(b)
		}
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastUnmarshal(t, data)
	})
}

// BenchmarkFastUnmarshal compares the readers on the random documents.
func BenchmarkFastUnmarshal(b *testing.B) {
	var data [][]byte

	for _, d := range fastTestDocuments(b)[:500] {
		if bs, err := marshalSlow(d); err == nil {
			data = append(data, bs)
		}
	}

	b.Run("Slow", func(b *testing.B) {
		b.ReportAllocs()

		for i := range b.N {
			_, _ = unmarshalSlow(data[i%len(data)])
		}
	})

	b.Run("Fast", func(b *testing.B) {
		b.ReportAllocs()

		for i := range b.N {
			_, _ = Unmarshal(data[i%len(data)])
		}
	})
}

// BenchmarkFastMarshal compares the writers on the random documents.
func BenchmarkFastMarshal(b *testing.B) {
	docs := fastTestDocuments(b)[:500]

	b.Run("Slow", func(b *testing.B) {
		b.ReportAllocs()

		for i := range b.N {
			_, _ = marshalSlow(docs[i%len(docs)])
		}
	})

	b.Run("Fast", func(b *testing.B) {
		b.ReportAllocs()

		for i := range b.N {
			_, _ = Marshal(docs[i%len(docs)])
		}
	})
}
