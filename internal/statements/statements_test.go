package statements

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestUnitCount(t *testing.T) {
	raw := func(d bson.D) bson.Raw {
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name string
		cmd  bson.D
		want int
	}{
		{"update", bson.D{{Key: "update", Value: "a"}, {Key: "updates", Value: bson.A{bson.D{}, bson.D{}, bson.D{}}}}, 3},
		{"delete", bson.D{{Key: "delete", Value: "a"}, {Key: "deletes", Value: bson.A{bson.D{}}}}, 1},
		{"insert", bson.D{{Key: "insert", Value: "a"}, {Key: "documents", Value: bson.A{bson.D{}, bson.D{}}}}, 2},
		{"findAndModify", bson.D{{Key: "findAndModify", Value: "a"}}, 1},
		{"find", bson.D{{Key: "find", Value: "a"}}, 0},
		{"getMore", bson.D{{Key: "getMore", Value: int64(1)}}, 0},
	} {
		if got := Count(tc.name, raw(tc.cmd)); got != tc.want {
			t.Errorf("%s: %d statements, want %d", tc.name, got, tc.want)
		}
	}
}
