package statements

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestWritten: the documents a write command's reply says it wrote, and
// their count by class.
func TestWritten(t *testing.T) {
	raw := func(d bson.D) bson.Raw {
		b, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		command string
		reply   bson.D
		want    int64
	}{
		{"insert", bson.D{{Key: "n", Value: int32(3)}, {Key: "ok", Value: 1.0}}, 3},
		{"update", bson.D{{Key: "n", Value: int32(4)}, {Key: "nModified", Value: int32(1)},
			{Key: "upserted", Value: bson.A{bson.D{{Key: "index", Value: int32(2)}, {Key: "_id", Value: "x"}}}}}, 2}, // one modified, one upserted
		{"update", bson.D{{Key: "n", Value: int32(0)}, {Key: "nModified", Value: int32(0)}}, 0},
		{"findAndModify", bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}}}}, 1},
		{"delete", bson.D{{Key: "n", Value: int64(1)}}, 1},
		{"find", bson.D{{Key: "n", Value: int32(5)}}, 0},
	} {
		if got := Written(tc.command, raw(tc.reply)); got != tc.want {
			t.Errorf("%s %v: %d written, want %d", tc.command, tc.reply, got, tc.want)
		}
	}

	var w Writes
	w.Start(1, "accounts")
	w.Start(2, "transactions")
	w.Start(3, "transactions_checkpoints")
	w.Start(4, "accounts")
	w.Succeeded(1, "update", raw(bson.D{{Key: "nModified", Value: int32(2)}}))
	w.Succeeded(2, "insert", raw(bson.D{{Key: "n", Value: int32(1)}}))
	w.Succeeded(3, "insert", raw(bson.D{{Key: "n", Value: int32(1)}}))
	w.Failed(4)
	w.Succeeded(4, "update", raw(bson.D{{Key: "nModified", Value: int32(9)}}))
	for class, want := range map[string]int64{Accounts: 2, Transactions: 1, Others: 1} {
		if got := w.Get(class); got != want {
			t.Errorf("%s: %d, want %d", class, got, want)
		}
	}
	w.Reset()
	if got := w.Get(Accounts); got != 0 {
		t.Errorf("after Reset: %d", got)
	}
}
