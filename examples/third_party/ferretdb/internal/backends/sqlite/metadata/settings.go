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

package metadata

import (
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"slices"

	"github.com/FerretDB/FerretDB/internal/util/lazyerrors"
)

// Settings represents collection settings.
type Settings struct {
	UUID            string      `json:"uuid"`
	Indexes         []IndexInfo `json:"indexes"`
	CappedSize      int64       `json:"cappedSize"`
	CappedDocuments int64       `json:"cappedDocuments"`
}

// IndexInfo represents information about a single index.
type IndexInfo struct {
	Name   string         `json:"name"`
	Key    []IndexKeyPair `json:"key"`
	Unique bool           `json:"unique"`

	// Elements is twopc's dev server's patch: the name of the index's
	// elements table (see elements.go), "" if it has none.
	Elements string `json:"twopc_elements,omitempty"`

	// ElementsKey is the field whose value the elements table holds in its
	// k column (the index's second key), "" if none.
	ElementsKey string `json:"twopc_elements_key,omitempty"`

	// Columns is twopc's dev server's patch: the key column of each of
	// Key's fields (see columns.go), nil for an index read by an
	// expression on the JSON column (_id's, or one made before the patch).
	Columns []string `json:"twopc_columns,omitempty"`
}

// IndexKeyPair consists of a field name and a sort order that are part of the index.
type IndexKeyPair struct {
	Field      string `json:"field"`
	Descending bool   `json:"descending"`
}

// deepCopy returns a deep copy.
func (s Settings) deepCopy() Settings {
	indexes := make([]IndexInfo, len(s.Indexes))

	for i, index := range s.Indexes {
		indexes[i] = IndexInfo{
			Name:   index.Name,
			Key:    slices.Clone(index.Key),
			Unique: index.Unique,

			Elements:    index.Elements,
			ElementsKey: index.ElementsKey,
			Columns:     slices.Clone(index.Columns),
		}
	}

	return Settings{
		UUID:            s.UUID,
		Indexes:         indexes,
		CappedSize:      s.CappedSize,
		CappedDocuments: s.CappedDocuments,
	}
}

// Value implements driver.Valuer interface.
func (s Settings) Value() (driver.Value, error) {
	res, err := json.Marshal(s)
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	return string(res), nil
}

// Scan implements sql.Scanner interface.
func (s *Settings) Scan(src any) error {
	var err error

	switch src := src.(type) {
	case nil:
		*s = Settings{}
	case []byte:
		err = json.Unmarshal(src, s)
	case string:
		err = json.Unmarshal([]byte(src), s)
	default:
		panic("can't scan collection settings")
	}

	if err != nil {
		return lazyerrors.Error(err)
	}

	return nil
}

// check interfaces
var (
	_ driver.Valuer = Settings{}
	_ sql.Scanner   = (*Settings)(nil)
)
