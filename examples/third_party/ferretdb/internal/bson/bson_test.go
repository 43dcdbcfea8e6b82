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

package bson

import (
	"testing"
	"time"

	"github.com/FerretDB/wire/wirebson"
	"github.com/stretchr/testify/require"

	"github.com/FerretDB/FerretDB/internal/types"
	"github.com/FerretDB/FerretDB/internal/util/must"
)

// TestToDocumentAsNewDocument checks (twopc's dev server) that ToDocument
// builds the document types.NewDocument builds from the same pairs,
// duplicate keys and nested documents included.
func TestToDocumentAsNewDocument(t *testing.T) {
	t.Parallel()

	now := time.UnixMilli(time.Now().UnixMilli()).UTC()

	inner := must.NotFail(wirebson.NewDocument("x", int32(1), "x", "dup"))
	arr := must.NotFail(wirebson.NewArray(int64(2), inner, wirebson.Null))
	doc := must.NotFail(wirebson.NewDocument(
		"_id", wirebson.ObjectID{1, 2, 3},
		"s", "é<",
		"d", 1.5,
		"t", now,
		"b", wirebson.Binary{B: nil, Subtype: wirebson.BinaryUser},
		"a", arr,
		"e", wirebson.MakeDocument(0),
		"s", "again",
	))

	raw := must.NotFail(doc.Encode())

	for _, d := range []wirebson.AnyDocument{doc, raw} {
		actual, err := ToDocument(d)
		require.NoError(t, err)

		expected := must.NotFail(types.NewDocument(
			"_id", types.ObjectID{1, 2, 3},
			"s", "é<",
			"d", 1.5,
			"t", now,
			"b", types.Binary{B: []byte{}, Subtype: types.BinaryUser},
			"a", must.NotFail(types.NewArray(int64(2), must.NotFail(types.NewDocument("x", int32(1), "x", "dup")), types.Null)),
			"e", must.NotFail(types.NewDocument()),
			"s", "again",
		))

		require.Equal(t, expected, actual)
	}
}
