package main

// -try: a few transactions for the feed to deliver. The operators' tool
// (cmd/twopc) makes no transfers (it captures and voids holds, cancels and
// reverses), so the example makes its own.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/twopc/twopc"
)

// try opens accounts A (1000) and B (0) if they are missing, then makes a
// transfer of 100 from A to B (with a key and metadata), one of 5000
// (more than A has: canceled), and a hold of 50 from A to B, left held for
// the operators' tool to capture or void. The feed has their events if
// its sequencer ran before: it numbers the events since its first run
// (by the log server's clock).
func try(ctx context.Context, cfg config, out io.Writer) error {
	c, closeAll, err := connect(cfg)
	if err != nil {
		return err
	}
	defer closeAll()
	feeds, err := c.Feeds(ctx)
	if err != nil {
		return err
	}
	if !slices.Contains(feeds, cfg.feed) {
		fmt.Fprintf(out, "feed %q has not run yet: these transactions are not in it (run the webhook with -sequencer first)\n", cfg.feed)
	}
	for id, balance := range map[string]int64{"A": 1000, "B": 0} {
		if err := c.OpenAccount(ctx, id, balance); err != nil && !errors.Is(err, twopc.ErrAccountExists) {
			return err
		}
	}
	order := strconv.FormatInt(time.Now().UnixMilli(), 10)
	t, err := c.Transfer(ctx, "A", "B", 100, twopc.WithKey("order/"+order), twopc.WithMetadata(map[string]string{"order": order}))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "transfer %s: A -> B 100, %s (an event: committed)\n", t.ID.Hex(), t.State)
	t, err = c.Transfer(ctx, "A", "B", 5000)
	if !errors.Is(err, twopc.ErrInsufficientFunds) {
		return fmt.Errorf("a transfer of more than A has: want insufficient funds, got %v", err)
	}
	fmt.Fprintf(out, "transfer %s: A -> B 5000, %s (%s) (an event: canceled)\n", t.ID.Hex(), t.State, t.Reason)
	h, err := c.Hold(ctx, "A", "B", 50, twopc.WithExpiry(time.Hour))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "hold %s: A -> B 50, %s (an event: held); capture or void it from the repository's root,\n", h.ID.Hex(), h.State)
	fmt.Fprintf(out, "with MONGODB_URI as here (or --uri):\n")
	fmt.Fprintf(out, "  go run ./cmd/twopc capture %s 30 --db %s   (an event: captured)\n", h.ID.Hex(), cfg.db)
	fmt.Fprintf(out, "  go run ./cmd/twopc void %s --db %s         (an event: voided)\n", h.ID.Hex(), cfg.db)
	return nil
}
