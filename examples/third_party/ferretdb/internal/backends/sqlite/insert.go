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

package sqlite

import (
	"fmt"
	"strings"

	"github.com/FerretDB/FerretDB/internal/backends/sqlite/metadata"
	"github.com/FerretDB/FerretDB/internal/handler/sjson"
	"github.com/FerretDB/FerretDB/internal/types"
	"github.com/FerretDB/FerretDB/internal/util/lazyerrors"
)

// prepareInsertStatement returns a statement and arguments for inserting the given documents.
//
// If capped is true, it returns a statement and arguments for inserting record IDs and documents.
func prepareInsertStatement(tableName string, capped bool, docs []*types.Document, keys []metadata.KeyField) (string, []any, error) {
	var args []any
	rows := make([]string, len(docs))

	// twopc's dev server: the key columns (metadata/columns.go) are
	// written by the INSERT, each computed by SQLite from the document's
	// JSON, a numbered parameter bound once.
	for i, doc := range docs {
		b, err := sjson.Marshal(doc)
		if err != nil {
			return "", nil, lazyerrors.Error(err)
		}

		var values []string

		if capped {
			args = append(args, doc.RecordID())
			values = append(values, fmt.Sprintf("?%d", len(args)))
		}

		args = append(args, string(b))
		n := len(args)
		values = append(values, fmt.Sprintf("?%d", n))

		for _, k := range keys {
			values = append(values, "("+strings.Replace(metadata.KeyExpr("", k.Field), metadata.DefaultColumn, fmt.Sprintf("?%d", n), 1)+")")
		}

		rows[i] = "(" + strings.Join(values, ", ") + ")"
	}

	columns := []string{metadata.DefaultColumn}
	if capped {
		columns = []string{metadata.RecordIDColumn, metadata.DefaultColumn}
	}

	for _, k := range keys {
		columns = append(columns, fmt.Sprintf("%q", k.Column))
	}

	return fmt.Sprintf(
		`INSERT INTO %q (%s) VALUES %s`,
		tableName,
		strings.Join(columns, ", "),
		strings.Join(rows, ", "),
	), args, nil
}
