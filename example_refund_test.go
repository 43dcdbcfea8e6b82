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

// ExampleCoordinator_RefundLegs refunds an order in part: first the
// seller's part of one item only, the platform's fee kept, then the rest,
// which takes from each leg what it has left, so every party ends where it
// started.
func ExampleCoordinator_RefundLegs() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_refund_legs")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "buyer", 1000)
	_ = c.OpenAccount(ctx, "seller", 0)
	_ = c.OpenAccount(ctx, "fees", 0)

	order, err := c.TransferLegs(ctx, []twopc.Leg{
		{Account: "buyer", Amount: -400},
		{Account: "seller", Amount: 360},
		{Account: "fees", Amount: 40},
	}, twopc.WithKey("order/18"))
	if err != nil {
		log.Fatal(err)
	}
	// One item returned: the seller gives back its 100, the fee is kept.
	item, err := c.RefundLegs(ctx, order.ID, []twopc.Leg{{Account: "seller", Amount: 100}}, twopc.WithKey("order/18/refund/item"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("item:", item.Legs)
	// The order canceled: the rest, from what each leg has left.
	left, _ := c.Refundable(ctx, order.ID)
	rest, err := c.Refund(ctx, order.ID, left, twopc.WithKey("order/18/refund/rest"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rest:", rest.Legs)
	left, _ = c.Refundable(ctx, order.ID)
	fmt.Println("left to refund", left)
	for _, id := range []string{"buyer", "seller", "fees"} {
		bal, _ := c.Balance(ctx, id)
		fmt.Println(id, bal)
	}
	// Output:
	// item: [buyer +100 seller -100]
	// rest: [buyer +300 seller -260 fees -40]
	// left to refund 0
	// buyer 1000
	// seller 0
	// fees 0
}

// ExampleCoordinator_RefundLegs_twoShipments refunds an order shipped in
// two parts as one: a hold captured twice (two shipments), refunded first
// in part, the seller's part of one item only and the platform's fee
// kept, then the rest, which takes from each leg what its captures took
// and it has left, so every party ends where it started.
func ExampleCoordinator_RefundLegs_twoShipments() {
	ctx := context.Background()
	db, cleanup := exampleDatabase(ctx, "twopc_example_refund_shipments")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "buyer", 1000)
	_ = c.OpenAccount(ctx, "seller", 0)
	_ = c.OpenAccount(ctx, "fees", 0)

	order, err := c.HoldLegs(ctx, []twopc.Leg{
		{Account: "buyer", Amount: -500},
		{Account: "seller", Amount: 450},
		{Account: "fees", Amount: 50},
	}, twopc.WithKey("order/19"))
	if err != nil {
		log.Fatal(err)
	}
	// Two shipments, the second the last: the 100 not shipped is released.
	if _, err := c.CaptureLegs(ctx, order.ID, []int64{-300, 270, 30}, twopc.WithFinalCapture(false), twopc.WithKey("order/19/shipment/1")); err != nil {
		log.Fatal(err)
	}
	if _, err := c.CaptureLegs(ctx, order.ID, []int64{-100, 90, 10}, twopc.WithKey("order/19/shipment/2")); err != nil {
		log.Fatal(err)
	}
	left, _ := c.Refundable(ctx, order.ID)
	fmt.Println("captured, refundable", left)

	// One item returned: the seller gives back its 90, the fee is kept.
	item, err := c.RefundLegs(ctx, order.ID, []twopc.Leg{{Account: "seller", Amount: 90}}, twopc.WithKey("order/19/refund/item"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("item:", item.Legs, "of the order:", item.RefundOf == order.ID)
	// The order canceled: the rest of both shipments, as one refund.
	left, _ = c.Refundable(ctx, order.ID)
	rest, err := c.Refund(ctx, order.ID, left, twopc.WithKey("order/19/refund/rest"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rest:", rest.Legs)
	left, _ = c.Refundable(ctx, order.ID)
	fmt.Println("left to refund", left)
	for _, id := range []string{"buyer", "seller", "fees"} {
		bal, _ := c.Balance(ctx, id)
		fmt.Println(id, bal)
	}
	// Output:
	// captured, refundable 400
	// item: [buyer +90 seller -90] of the order: true
	// rest: [buyer +310 seller -270 fees -40]
	// left to refund 0
	// buyer 1000
	// seller 0
	// fees 0
}
