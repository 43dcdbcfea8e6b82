// Command demo runs transfers through the twopc library and prints each
// protocol step with the state it leaves the transaction in: a transfer to
// done, an overdraft that rolls back to canceled, and a transfer whose
// process "dies" before its commit point, finished by a Recoverer of
// another application.
//
// It connects to MONGODB_URI if set; otherwise it starts the dev server
// (FerretDB behind a serializing front) in-process, on a free port, with
// its data in a temporary directory.
//
//	go run ./cmd/demo
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/twopc/twopc"
	"github.com/twopc/twopc/examples/devserver"
	"github.com/twopc/twopc/examples/internal/steps"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	uri, started, stop, err := devserver.URIOrStart(ctx)
	if err != nil {
		return err
	}
	defer stop()
	if started {
		fmt.Fprintln(out, "server: dev server (FerretDB behind a serializing front) at", uri)
	} else {
		fmt.Fprintln(out, "server: MONGODB_URI")
	}
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		return err
	}
	defer client.Disconnect(context.Background())
	db := client.Database(fmt.Sprintf("twopc_demo_%d", time.Now().UnixNano()))
	defer db.Drop(context.Background())

	// The step hook is called before each protocol step; steps prints each
	// with the state it left the transaction in.
	var crashAtCommit bool
	steps := steps.NewPrinter(out)
	hook := func(_ context.Context, s twopc.Step, t *twopc.Txn) error {
		if crashAtCommit && s == twopc.StepCommit {
			crashAtCommit = false
			steps.NotMade(s, t, "the process died")
			return errors.New("the process died")
		}
		steps.Before(s, t)
		return nil
	}
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("demo"), twopc.WithStepHook(hook), twopc.WithSyncSettle())
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	if err := c.EnsureIndexes(ctx); err != nil {
		return err
	}
	for _, id := range []string{"A", "B"} {
		if err := c.OpenAccount(ctx, id, 1000); err != nil {
			return err
		}
	}
	balances := func() error {
		fmt.Fprint(out, "  balances:")
		for _, id := range []string{"A", "B"} {
			a, err := c.Account(ctx, id)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, " %s=%d", id, a.Balance)
			if a.PendingCredit != 0 {
				fmt.Fprintf(out, " (+%d held until settled)", a.PendingCredit)
			}
		}
		fmt.Fprintln(out)
		return nil
	}
	fmt.Fprintln(out, "seeded two accounts:")
	if err := balances(); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n1. transfer 100 from A to B:")
	txn, err := c.Transfer(ctx, "A", "B", 100)
	if err != nil {
		return err
	}
	steps.Returned(txn)
	fmt.Fprintf(out, "  transaction %s is %s\n", txn.ID.Hex(), txn.State)
	if err := balances(); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n2. transfer 5000 from A to B (more than A has):")
	txn, err = c.Transfer(ctx, "A", "B", 5000)
	if !errors.Is(err, twopc.ErrInsufficientFunds) {
		return fmt.Errorf("want insufficient funds, got %v", err)
	}
	steps.Returned(txn)
	fmt.Fprintf(out, "  transaction %s is %s (%s)\n", txn.ID.Hex(), txn.State, txn.Reason)
	if err := balances(); err != nil {
		return err
	}

	fmt.Fprintln(out, "\n3. transfer 250 from B to A; the process dies before its commit point:")
	crashAtCommit = true
	txn, err = c.Transfer(ctx, "B", "A", 250)
	fmt.Fprintf(out, "  Transfer returned: %v\n", err)
	fmt.Fprintf(out, "  transaction %s is left %s, both legs applied (the credit held)\n", txn.ID.Hex(), txn.State)
	if err := balances(); err != nil {
		return err
	}
	// Make it look stale, as it would be after StaleAfter (a minute), so
	// the demo need not wait.
	_, err = db.Collection("transactions").UpdateOne(ctx, bson.D{{Key: "_id", Value: txn.ID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "lastModified", Value: time.Now().Add(-time.Hour)}}}})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "  a recoverer of another application finds it stale and rolls it forward:")
	rc, err := twopc.NewCoordinator(db, twopc.WithApplication("recoverer"), twopc.WithStepHook(hook))
	if err != nil {
		return err
	}
	defer rc.Close(context.Background())
	rep, err := twopc.NewRecoverer(rc).RecoverOnce(ctx)
	if err != nil {
		return err
	}
	txn, err = c.Get(ctx, txn.ID)
	if err != nil {
		return err
	}
	steps.Returned(txn)
	fmt.Fprintf(out, "  recovery: %d rolled forward; transaction %s is %s\n", rep.RolledForward, txn.ID.Hex(), txn.State)
	return balances()
}
