package twopc_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/twopc/twopc"
)

// ExampleCoordinator_Refund refunds a sale that paid a seller and a fee
// in two parts: each refund takes from both in proportion, and a refund
// past what is left is refused with nothing written.
func ExampleCoordinator_Refund() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_refund")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "buyer", 1000)
	_ = c.OpenAccount(ctx, "seller", 0)
	_ = c.OpenAccount(ctx, "fees", 0)

	sale, err := c.TransferLegs(ctx, []twopc.Leg{
		{Account: "buyer", Amount: -400},
		{Account: "seller", Amount: 360},
		{Account: "fees", Amount: 40},
	}, twopc.WithKey("order/17"))
	if err != nil {
		log.Fatal(err)
	}
	for i, part := range []int64{100, 250, 100} {
		refund, err := c.Refund(ctx, sale.ID, part, twopc.WithKey(fmt.Sprintf("order/17/refund/%d", i+1)))
		switch {
		case errors.Is(err, twopc.ErrRefundExceeded):
			fmt.Println("refund of", part, "refused: more than is left")
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println("refunded", refund.Value, "of", refund.RefundOf == sale.ID)
		}
	}
	left, _ := c.Refundable(ctx, sale.ID)
	fmt.Println("left to refund", left)
	for _, id := range []string{"buyer", "seller", "fees"} {
		bal, _ := c.Balance(ctx, id)
		fmt.Println(id, bal)
	}
	// Output:
	// refunded 100 of true
	// refunded 250 of true
	// refund of 100 refused: more than is left
	// left to refund 50
	// buyer 950
	// seller 45
	// fees 5
}
