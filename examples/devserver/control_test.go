package devserver_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/twopc/twopc/examples/devserver"
)

// call sends an HTTP request with an optional JSON body, checks the status
// and decodes the JSON answer into out (when not nil).
func call(t *testing.T, method, url, body string, wantStatus int, out any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, wantStatus, resp.StatusCode, "%s %s", method, url)
	if out != nil {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
}

func TestControlAPI(t *testing.T) {
	s := startServer(t, devserver.Config{})
	api := httptest.NewServer(devserver.ControlHandler(s.Front()))
	t.Cleanup(api.Close)
	coll := collection(t, connect(t, s.URI()), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})

	var created struct{ ID uint64 }
	call(t, "POST", api.URL+"/faults",
		`{"command":"update","kind":"drop_after_forward","probability":1,"count":1,"seed":1}`,
		http.StatusOK, &created)
	require.NotZero(t, created.ID)

	var listed []map[string]any
	call(t, "GET", api.URL+"/faults", "", http.StatusOK, &listed)
	require.Len(t, listed, 1)
	assert.Equal(t, "drop_after_forward", listed[0]["kind"])
	assert.Equal(t, "update", listed[0]["command"])
	assert.EqualValues(t, 1, listed[0]["remaining"])

	_, err := coll.UpdateOne(t.Context(), byID, inc)
	require.Error(t, err)
	assert.Equal(t, int32(1), field(t, coll, 1, "n"))

	var stats map[string]uint64
	call(t, "GET", api.URL+"/stats", "", http.StatusOK, &stats)
	assert.Equal(t, uint64(1), stats["drop_after_forward"])
	assert.Zero(t, stats["drop_before_forward"])
	assert.Zero(t, stats["delay"])
	assert.NotZero(t, stats["forwarded"])
	assert.Len(t, stats, 4)

	// A delay rule, removed by id; then a catch-all rule, removed by DELETE /faults.
	call(t, "POST", api.URL+"/faults", `{"command":"find","kind":"delay","delay":"50ms"}`, http.StatusOK, &created)
	call(t, "DELETE", fmt.Sprintf("%s/faults/%d", api.URL, created.ID), "", http.StatusNoContent, nil)
	call(t, "DELETE", fmt.Sprintf("%s/faults/%d", api.URL, created.ID), "", http.StatusNotFound, nil)
	call(t, "POST", api.URL+"/faults", `{"kind":"drop_before_forward"}`, http.StatusOK, &created)
	_, err = coll.UpdateOne(t.Context(), byID, inc)
	require.Error(t, err)
	call(t, "DELETE", api.URL+"/faults", "", http.StatusNoContent, nil)
	call(t, "GET", api.URL+"/faults", "", http.StatusOK, &listed)
	assert.Empty(t, listed)
	_, err = coll.UpdateOne(t.Context(), byID, inc)
	require.NoError(t, err)
	assert.Equal(t, int32(2), field(t, coll, 1, "n"))

	for _, bad := range []string{
		`{"kind":"explode"}`,
		`{"command":"update"}`,
		`{"kind":"delay"}`,
		`{"kind":"delay","delay":"soon"}`,
		`{"kind":"drop_after_forward","probability":2}`,
		`{"kind":"drop_after_forward","count":-1}`,
		`{"kind":"drop_after_forward","typo":1}`,
		`not json`,
	} {
		var answer struct{ Error string }
		call(t, "POST", api.URL+"/faults", bad, http.StatusBadRequest, &answer)
		assert.NotEmpty(t, answer.Error, bad)
	}
	call(t, "GET", api.URL+"/faults", "", http.StatusOK, &listed)
	assert.Empty(t, listed, "refused rules are not installed")
}

func TestWork(t *testing.T) {
	s := startServer(t, devserver.Config{})
	api := httptest.NewServer(devserver.ControlHandler(s.Front()))
	t.Cleanup(api.Close)
	coll := collection(t, connect(t, s.URI()), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})

	call(t, "DELETE", api.URL+"/work", "", http.StatusNoContent, nil)
	var work []devserver.Work
	call(t, "GET", api.URL+"/work", "", http.StatusOK, &work)
	assert.Empty(t, work, "nothing since the reset")

	// One update command of three statements, two finds, and pings, which
	// pass without the lock and are not counted.
	res, err := coll.BulkWrite(t.Context(), []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(byID).SetUpdate(inc),
		mongo.NewUpdateOneModel().SetFilter(byID).SetUpdate(inc),
		mongo.NewUpdateOneModel().SetFilter(byID).SetUpdate(inc),
	})
	require.NoError(t, err)
	require.Equal(t, int64(3), res.ModifiedCount)
	for range 2 {
		require.NoError(t, coll.FindOne(t.Context(), byID).Err())
	}
	require.NoError(t, coll.Database().Client().Ping(t.Context(), nil))

	call(t, "GET", api.URL+"/work", "", http.StatusOK, &work)
	byKind := map[string]devserver.Work{}
	for _, w := range work {
		byKind[w.Command+" "+w.Collection] = w
		assert.Positive(t, w.Busy, "%s %s", w.Command, w.Collection)
	}
	name := coll.Name()
	assert.Equal(t, devserver.Work{Command: "update", Collection: name, Requests: 1, Statements: 3, Busy: byKind["update "+name].Busy}, byKind["update "+name])
	assert.Equal(t, devserver.Work{Command: "find", Collection: name, Requests: 2, Statements: 2, Busy: byKind["find "+name].Busy}, byKind["find "+name])
	assert.NotContains(t, byKind, "ping ", "ping passes without the lock")
	for i := 1; i < len(work); i++ {
		assert.GreaterOrEqual(t, work[i-1].Busy, work[i].Busy, "busiest first")
	}
	assert.Equal(t, work, s.Front().Work(), "the API answers what the front counts")

	call(t, "DELETE", api.URL+"/work", "", http.StatusNoContent, nil)
	call(t, "GET", api.URL+"/work", "", http.StatusOK, &work)
	assert.Empty(t, work)
}
