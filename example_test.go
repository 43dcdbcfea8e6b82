package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/twopc/twopc"
)

// exampleDatabase connects to MONGODB_URI and returns an empty database.
func exampleDatabase(ctx context.Context, name string) (*mongo.Database, func()) {
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	db := client.Database(name)
	if err := db.Drop(ctx); err != nil {
		log.Fatal(err)
	}
	return db, func() { _ = db.Drop(ctx); _ = client.Disconnect(ctx) }
}

// A transfer between two accounts, as in MongoDB's tutorial.
func Example() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example")
	defer cleanup()

	c, err := twopc.NewCoordinator(db, twopc.WithApplication("example"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.EnsureIndexes(ctx); err != nil {
		log.Fatal(err)
	}
	_ = c.OpenAccount(ctx, "A", 1000)
	_ = c.OpenAccount(ctx, "B", 1000)

	txn, err := c.Transfer(ctx, "A", "B", 100)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("transfer", txn.Source, "→", txn.Destination, txn.Value, "is", txn.State)

	if err := c.Settle(ctx); err != nil { // wait for background settling
		log.Fatal(err)
	}
	txn, _ = c.Get(ctx, txn.ID)
	a, _ := c.Balance(ctx, "A")
	b, _ := c.Balance(ctx, "B")
	fmt.Println("now", txn.State, "A:", a, "B:", b)
	// Output:
	// transfer A → B 100 is applied
	// now done A: 900 B: 1100
}

// Transfer, and how a caller tells its outcomes apart with errors.Is: the
// money moved, or the transfer was refused and nothing moved, or the call
// could not tell (then repeating it with the same key is safe).
func ExampleCoordinator_Transfer() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_transfer")
	defer cleanup()
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("payments-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.EnsureIndexes(ctx); err != nil {
		log.Fatal(err)
	}
	_ = c.OpenAccount(ctx, "alice", 1000)
	_ = c.OpenAccount(ctx, "bob", 0)

	for i, value := range []int64{600, 600} {
		key := fmt.Sprintf("order-%d", i+1) // one key per transfer
		txn, err := c.Transfer(ctx, "alice", "bob", value, twopc.WithKey(key))
		switch {
		case err == nil:
			fmt.Println(key, "moved", txn.Value, "and is", txn.State)
		case errors.Is(err, twopc.ErrInsufficientFunds):
			fmt.Println(key, "refused, nothing moved:", txn.State)
		case errors.Is(err, twopc.ErrInvalidTransfer):
			fmt.Println(key, "bad input, nothing written:", err)
		default:
			// The outcome is not known to this call (the database, the
			// context): repeat it with the same key, or read txn.ID later.
			log.Fatal(err)
		}
	}

	// A committed transfer settles in the background; until then bob's
	// credit is in his PendingCredit, not yet in his Balance.
	if err := c.Settle(ctx); err != nil {
		log.Fatal(err)
	}
	a, _ := c.Balance(ctx, "alice")
	b, _ := c.Balance(ctx, "bob")
	fmt.Println("alice:", a, "bob:", b)
	// Output:
	// order-1 moved 600 and is applied
	// order-2 refused, nothing moved: canceled
	// alice: 400 bob: 600
}

// A transfer the source cannot cover ends canceled, and nothing moves.
func ExampleCoordinator_Transfer_insufficientFunds() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_funds")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "A", 50)
	_ = c.OpenAccount(ctx, "B", 0)

	txn, err := c.Transfer(ctx, "A", "B", 80)
	fmt.Println(errors.Is(err, twopc.ErrInsufficientFunds), txn.State, txn.Reason)
	a, _ := c.Balance(ctx, "A")
	fmt.Println("A:", a)
	// Output:
	// true canceled insufficient_funds
	// A: 50
}

// An idempotency key makes a retried transfer safe: the second call
// returns the first transaction and moves nothing.
func ExampleWithKey() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_key")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db)
	defer c.Close(ctx)
	_ = c.EnsureIndexes(ctx)
	_ = c.OpenAccount(ctx, "A", 100)
	_ = c.OpenAccount(ctx, "B", 0)

	first, _ := c.Transfer(ctx, "A", "B", 30, twopc.WithKey("order-42"))
	retry, _ := c.Transfer(ctx, "A", "B", 30, twopc.WithKey("order-42"))
	a, _ := c.Balance(ctx, "A")
	fmt.Println(first.ID == retry.ID, "A:", a)
	// Output:
	// true A: 70
}

// Metadata travels with the transfer, written once, and comes back from
// Get and GetByKey.
func ExampleWithMetadata() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_metadata")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db)
	defer c.Close(ctx)
	_ = c.EnsureIndexes(ctx)
	_ = c.OpenAccount(ctx, "alice", 5000)
	_ = c.OpenAccount(ctx, "shop", 0)

	_, _ = c.Transfer(ctx, "alice", "shop", 1250, twopc.WithKey("order/o-17"),
		twopc.WithMetadata(map[string]string{"order": "o-17", "memo": "2 coffees"}))
	txn, _ := c.GetByKey(ctx, "order/o-17")
	fmt.Println(txn.Metadata["order"], txn.Metadata["memo"])
	// Output:
	// o-17 2 coffees
}

// An exchange between two assets is one transfer whose legs sum to zero
// per asset; a leg of another asset than its account's, or past an
// account's floor, is refused by the server and moves nothing.
func ExampleAccountAsset() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_assets")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "alice", 100_00, twopc.AccountAsset("USD/2"), twopc.AccountFloor(-20_00))
	_ = c.OpenAccount(ctx, "desk-usd", 0, twopc.AccountAsset("USD/2"))
	_ = c.OpenAccount(ctx, "desk-eur", 1000_00, twopc.AccountAsset("EUR/2"))
	_ = c.OpenAccount(ctx, "bob", 0, twopc.AccountAsset("EUR/2"))

	_, err := c.TransferLegs(ctx, []twopc.Leg{
		{Account: "alice", Amount: -110_00, Asset: "USD/2"}, {Account: "desk-usd", Amount: 110_00, Asset: "USD/2"},
		{Account: "desk-eur", Amount: -101_20, Asset: "EUR/2"}, {Account: "bob", Amount: 101_20, Asset: "EUR/2"},
	})
	fmt.Println(err)
	_, err = c.Transfer(ctx, "alice", "bob", 1_00, twopc.WithAsset("USD/2"))
	fmt.Println(errors.Is(err, twopc.ErrAssetMismatch))
	_, err = c.Transfer(ctx, "alice", "desk-usd", 10_01, twopc.WithAsset("USD/2"))
	fmt.Println(errors.Is(err, twopc.ErrInsufficientFunds))
	alice, _ := c.Account(ctx, "alice")
	bob, _ := c.Account(ctx, "bob")
	fmt.Println(alice.Balance, alice.Floor, bob.Balance, bob.Asset)
	// Output:
	// <nil>
	// true
	// true
	// -1000 -2000 10120 EUR/2
}

// BalanceAt answers an account's balance at any time from its entries,
// and ErrBeforeOpening for a time before OpenAccount opened it.
func ExampleCoordinator_BalanceAt() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_balance_at")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.EnsureIndexes(ctx)
	_ = c.OpenAccount(ctx, "alice", 5000)
	_ = c.OpenAccount(ctx, "shop", 0)

	_, _ = c.Transfer(ctx, "alice", "shop", 1250)
	_, _ = c.Transfer(ctx, "alice", "shop", 250)
	_, err := c.BalanceAt(ctx, "", "alice", time.Now().Add(-time.Hour))
	now, _ := c.BalanceAt(ctx, "", "alice", time.Now().Add(time.Minute))
	fmt.Println(errors.Is(err, twopc.ErrBeforeOpening), now)
	// Output:
	// true 3500
}

// A transfer that stopped before its commit point (here a step hook plays
// the crash) can be canceled: its applied legs are undone.
func ExampleCanceler_Cancel() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_cancel")
	defer cleanup()
	crash := func(_ context.Context, s twopc.Step, _ *twopc.Txn) error {
		if s == twopc.StepCommit {
			return errors.New("process died")
		}
		return nil
	}
	c, _ := twopc.NewCoordinator(db, twopc.WithApplication("shop"), twopc.WithStepHook(crash))
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "A", 100)
	_ = c.OpenAccount(ctx, "B", 0)

	txn, err := c.Transfer(ctx, "A", "B", 60)
	a, _ := c.Balance(ctx, "A")
	fmt.Println(txn.State, "A:", a, err != nil)

	canceled, err := twopc.NewCanceler(c).Cancel(ctx, txn.ID)
	if err != nil {
		log.Fatal(err)
	}
	a, _ = c.Balance(ctx, "A")
	fmt.Println(canceled.State, "A:", a)
	// Output:
	// pending A: 40 true
	// canceled A: 100
}

// A service runs a Recoverer beside its coordinator, with majority write
// concern so that recovery survives a failover.
func ExampleRecoverer_Run() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	client, err := mongo.Connect(options.Client().ApplyURI(os.Getenv("MONGODB_URI")))
	if err != nil {
		log.Fatal(err)
	}
	db := client.Database("bank", options.Database().SetWriteConcern(writeconcern.Majority()))
	c, err := twopc.NewCoordinator(db, twopc.WithApplication("payments-1"), twopc.WithStaleAfter(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	r := twopc.NewRecoverer(c, twopc.WithInterval(30*time.Second), twopc.WithRecoveryLogger(slog.Default()))
	go func() { _ = r.Run(ctx) }()
	// ... serve transfers with c.Transfer ...
}

// A payment split between the merchant and a fee account, in one transfer
// of three legs: all apply, or none.
func ExampleCoordinator_TransferLegs() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_legs")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "customer", 1000)
	_ = c.OpenAccount(ctx, "merchant", 0)
	_ = c.OpenAccount(ctx, "fees", 0)

	txn, err := c.TransferLegs(ctx, []twopc.Leg{
		{Account: "customer", Amount: -250},
		{Account: "merchant", Amount: 243},
		{Account: "fees", Amount: 7},
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(txn.State, txn.Value)
	for _, id := range []string{"customer", "merchant", "fees"} {
		bal, _ := c.Balance(ctx, id)
		fmt.Println(id, bal)
	}
	// Output:
	// done 250
	// customer 750
	// merchant 243
	// fees 7
}

// ExampleCoordinator_TransferBatch pays three employees in one call: two
// transfers commit, the third is refused on its own (the account is
// missing: refused before anything of it is written), and the batch's
// commands are the same few whatever its size.
func ExampleCoordinator_TransferBatch() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_batch")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "payroll", 10_000)
	_ = c.OpenAccount(ctx, "alice", 0)
	_ = c.OpenAccount(ctx, "bob", 0)

	results, err := c.TransferBatch(ctx, []twopc.TransferRequest{
		{Source: "payroll", Destination: "alice", Value: 3000, Key: "2026-11/alice"},
		{Source: "payroll", Destination: "bob", Value: 2800, Key: "2026-11/bob"},
		{Source: "payroll", Destination: "carol", Value: 2900, Key: "2026-11/carol"},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil {
			// carol has no account: refused, nothing written.
			fmt.Println(errors.Is(r.Err, twopc.ErrAccountNotFound), r.Txn == nil)
			continue
		}
		fmt.Println(r.Txn.Destination, r.Txn.State)
	}
	p, _ := c.Balance(ctx, "payroll")
	fmt.Println("payroll:", p)
	// Output:
	// alice done
	// bob done
	// true true
	// payroll: 4200
}

// A card authorization: 300 held on A for B, captured for 240 once the
// final amount is known; the other 60 returns to A.
func ExampleCoordinator_Hold() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_hold")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "A", 1000)
	_ = c.OpenAccount(ctx, "B", 0)

	hold, err := c.Hold(ctx, "A", "B", 300, twopc.WithExpiry(7*24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	a, _ := c.Account(ctx, "A")
	b, _ := c.Account(ctx, "B")
	fmt.Println(hold.State, "A:", a.Balance, "held", a.Held, "B:", b.Balance, "pending", b.PendingCredit)

	// The capture is a transaction of its own; by default the hold's
	// last, so the rest (60) returns to A.
	capture, err := c.Capture(ctx, hold.ID, 240, twopc.WithKey("order-7/capture"))
	if err != nil {
		log.Fatal(err)
	}
	hold, _ = c.Get(ctx, hold.ID)
	a, _ = c.Account(ctx, "A")
	b, _ = c.Account(ctx, "B")
	fmt.Println("capture", capture.State, capture.Value, "hold", hold.State, "captured", hold.Captured, "A:", a.Balance, "B:", b.Balance)

	_, err = c.Void(ctx, hold.ID) // too late: it was captured
	fmt.Println(errors.Is(err, twopc.ErrHoldCaptured))
	// Output:
	// held A: 700 held 300 B: 0 pending 300
	// capture done 240 hold done captured 240 A: 760 B: 240
	// true
}

// A split hold (a buyer pays a seller and the marketplace's fee) captured
// in two parts, one per shipment: each capture takes a part of every leg,
// is a transaction of its own with its own key and entries, and the last
// ends the hold.
func ExampleCoordinator_CaptureLegs() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_capture_legs")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	for id, balance := range map[string]int64{"buyer": 10_000, "seller": 0, "fees": 0} {
		_ = c.OpenAccount(ctx, id, balance)
	}
	hold, err := c.HoldLegs(ctx, []twopc.Leg{{Account: "buyer", Amount: -10_000}, {Account: "seller", Amount: 9_000}, {Account: "fees", Amount: 1_000}},
		twopc.WithKey("order-17"))
	if err != nil {
		log.Fatal(err)
	}
	show := func(what string) {
		buyer, _ := c.Account(ctx, "buyer")
		seller, _ := c.Account(ctx, "seller")
		fees, _ := c.Account(ctx, "fees")
		fmt.Printf("%s: buyer %d (held %d), seller %d, fees %d\n", what, buyer.Balance, buyer.Held, seller.Balance, fees.Balance)
	}
	show("held")

	first, err := c.CaptureLegs(ctx, hold.ID, []int64{-6_000, 5_400, 600}, twopc.WithFinalCapture(false), twopc.WithKey("order-17/shipment-1"))
	if err != nil {
		log.Fatal(err)
	}
	show("shipment 1")
	// The second shipment costs 3,000 of the 4,000 left: the last capture,
	// so the rest (1,000) returns to the buyer.
	second, err := c.CaptureLegs(ctx, hold.ID, []int64{-3_000, 2_700, 300}, twopc.WithKey("order-17/shipment-2"))
	if err != nil {
		log.Fatal(err)
	}
	show("shipment 2")
	h, _ := c.Get(ctx, hold.ID)
	fmt.Println("captures:", first.State, second.State, "hold:", h.State, "captured", h.Captured)

	_, err = c.CaptureLegs(ctx, hold.ID, []int64{-1_000, 900, 100})
	fmt.Println(errors.Is(err, twopc.ErrHoldCaptured))
	// Output:
	// held: buyer 0 (held 10000), seller 0, fees 0
	// shipment 1: buyer 0 (held 4000), seller 5400, fees 600
	// shipment 2: buyer 1000 (held 0), seller 8100, fees 900
	// captures: done done hold: done captured 9000
	// true
}

// An account's transactions, in any state, filtered and paged: here the
// transfers of one order, newest first, and every transaction by the
// iterator, oldest first.
func ExampleCoordinator_Transactions() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_transactions")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "alice", 5000)
	_ = c.OpenAccount(ctx, "shop", 0)

	order := twopc.WithMetadata(map[string]string{"order": "o-17"})
	_, _ = c.Transfer(ctx, "alice", "shop", 1250, order)
	_, _ = c.Transfer(ctx, "alice", "shop", 9000) // refused: canceled, but listed
	_, _ = c.Transfer(ctx, "shop", "alice", 250, order)

	page, err := c.Transactions(ctx, "", "alice", twopc.TransactionQuery{
		Metadata: map[string]string{"order": "o-17"}, Reverse: true, Limit: 10})
	if err != nil {
		log.Fatal(err)
	}
	for _, txn := range page.Txns {
		fmt.Println(txn.Source, "→", txn.Destination, txn.Value, txn.State)
	}
	for txn, err := range c.Txns(ctx, "", "alice", twopc.TransactionQuery{}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(txn.Value, txn.State)
	}
	// Output:
	// shop → alice 250 done
	// alice → shop 1250 done
	// 1250 done
	// 9000 canceled
	// 250 done
}

// The accounts of a ledger, of one asset, by pages.
func ExampleCoordinator_Accounts() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_accounts")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db)
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "carol", 300, twopc.AccountAsset("USD/2"))
	_ = c.OpenAccount(ctx, "alice", 100, twopc.AccountAsset("USD/2"))
	_ = c.OpenAccount(ctx, "bob", 200, twopc.AccountAsset("EUR/2"))

	q := twopc.AccountQuery{Asset: "USD/2", Limit: 1}
	for {
		page, err := c.Accounts(ctx, "", q)
		if err != nil {
			log.Fatal(err)
		}
		for _, a := range page.Accounts {
			fmt.Println(a.ID, a.Balance, a.Asset)
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	// Output:
	// alice 100 USD/2
	// carol 300 USD/2
}
