package main

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc/examples/internal/interrupttest"
)

// checkRun checks what every run prints: the example's balances and
// outcomes, each step with the state it left.
func checkRun(t *testing.T, s string) {
	t.Helper()
	require.Contains(t, s, "balances: shanghai/A=900 beijing/B=100")
	require.Contains(t, s, "is canceled (insufficient_funds)")
	require.Contains(t, s, "recovery: 1 rolled forward")
	require.Contains(t, s, "balances: shanghai/A=650 beijing/B=350")
	steps := func(pattern string) int {
		return len(regexp.MustCompile(`(?m)^    step `+pattern+`$`).FindAllString(s, -1))
	}
	require.Equal(t, 2, steps(`done +leaves it done`), "transfer 1 and the recovered one end done:\n%s", s)
	require.Equal(t, 1, steps(`canceled +leaves it canceled`), "transfer 2 ends canceled:\n%s", s)
}

// bankURIs returns the URIs of the two banks' servers, as the run printed
// them.
func bankURIs(t *testing.T, s string) []string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^bank of [a-z]+: its own dev server at (mongodb://\S+)$`).FindAllStringSubmatch(s, -1)
	require.Len(t, m, 2, s)
	return []string{m[0][1], m[1][1]}
}

func connect(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(2 * time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client
}

// TestBanks runs the two-bank example end to end without -serve: it prints
// no command lines for the servers it stops, only how to keep them up, and
// the servers are down when it returns.
func TestBanks(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, nil), out.String())
	s := out.String()
	checkRun(t, s)
	require.NotContains(t, s, "cmd/twopc status", "no command lines for stopped servers")
	require.NotContains(t, s, "--uri", "no command lines for stopped servers")
	require.Regexp(t, `both banks' servers stop with the run\..*\n.*make banks ARGS=-serve`, s)
	for _, uri := range bankURIs(t, s) {
		u, err := url.Parse(uri)
		require.NoError(t, err)
		conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
		if err == nil {
			_ = conn.Close()
		}
		require.Error(t, err, "the server at %s is stopped when the run ends", uri)
	}
}

// TestBanksServe runs it as -serve does: the command lines are printed and,
// while the run holds, name servers that are up, with the log and the
// accounts where the lines say.
func TestBanksServe(t *testing.T) {
	var out interrupttest.Output
	held := false
	hold := func() {
		held = true
		s := out.String()
		coordinator := regexp.MustCompile(`(?m)^  go run \./cmd/twopc status --uri (mongodb://\S+)/coordinator$`).FindStringSubmatch(s)
		require.NotNil(t, coordinator, s)
		show := regexp.MustCompile(`(?m)^  go run \./cmd/twopc show --uri \S+ --ledger shanghai=(mongodb://\S+)/bank\.accounts --ledger beijing=(mongodb://\S+)/bank\.accounts ([0-9a-f]{24})$`).FindStringSubmatch(s)
		require.NotNil(t, show, s)
		require.Regexp(t, `twopc recover --uri mongodb://\S+/coordinator --ledger shanghai=mongodb://\S+/bank\.accounts --ledger beijing=mongodb://\S+/bank\.accounts\n`, s)
		require.Regexp(t, `twopc audit --uri mongodb://\S+/coordinator --ledger shanghai=mongodb://\S+/bank\.accounts --ledger beijing=mongodb://\S+/bank\.accounts --total shanghai=650 --total beijing=350\n`, s)

		id, err := bson.ObjectIDFromHex(show[3])
		require.NoError(t, err)
		ctx := context.Background()
		n, err := connect(t, coordinator[1]).Database("coordinator").Collection("transactions").CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "the transaction the show line names is in the log at its --uri")
		for _, uri := range show[1:3] {
			n, err := connect(t, uri).Database("bank").Collection("accounts").CountDocuments(ctx, bson.D{})
			require.NoError(t, err, "the ledger at %s is up", uri)
			require.Equal(t, int64(1), n, "one account at each bank")
		}
	}
	require.NoError(t, run(context.Background(), &out, hold), out.String())
	require.True(t, held)
	s := out.String()
	checkRun(t, s)
	require.NotContains(t, s, "ARGS=-serve")
}
