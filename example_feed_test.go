package twopc_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/twopc/twopc"
)

// A change feed: its sequencer runs beside the transfers (one per feed
// across processes), and a reader follows the events from a position
// that depends on no clock. A hold held then voided is two events; a
// transfer refused for funds is one, canceled.
func ExampleCoordinator_Feed() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	db, cleanup := exampleDatabase(ctx, "twopc_example_feed")
	defer cleanup()
	c, _ := twopc.NewCoordinator(db, twopc.WithSyncSettle())
	defer c.Close(ctx)
	_ = c.OpenAccount(ctx, "A", 1000)
	_ = c.OpenAccount(ctx, "B", 0)

	f := c.Feed("webhooks", twopc.WithFeedPoll(10*time.Millisecond))
	go f.Run(ctx) // blocks until ctx is done
	for {         // the feed numbers the transactions created once it exists
		if st, err := f.Status(ctx); err == nil && !st.Since.IsZero() {
			break
		}
	}

	_, _ = c.Transfer(ctx, "A", "B", 100)
	_, err := c.Transfer(ctx, "A", "B", 5000) // refused: canceled
	fmt.Println(err != nil)
	hold, _ := c.Hold(ctx, "A", "B", 50)
	_, _ = c.Void(ctx, hold.ID)

	kinds := map[twopc.EventKind]int{}
	n := 0
	for e, err := range f.All(ctx, "") {
		if err != nil {
			log.Fatal(err)
		}
		kinds[e.Kind]++ // e.ID is the dedupe key; e.Pos resumes after e
		if n++; n == 4 {
			break
		}
	}
	fmt.Println(kinds[twopc.EventCommitted], "committed,", kinds[twopc.EventCanceled], "canceled,",
		kinds[twopc.EventHeld], "held,", kinds[twopc.EventVoided], "voided")
	// Output:
	// true
	// 1 committed, 1 canceled, 1 held, 1 voided
}
