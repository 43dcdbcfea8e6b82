package main

import (
	"fmt"

	"github.com/twopc/twopc/internal/statements"
)

// docWrites counts the documents written by class of collection, from the
// replies of the write commands a monitor saw start (see
// internal/statements).
type docWrites struct{ statements.Writes }

// perTransfer returns the writes per transfer of n, by class.
func (w *docWrites) perTransfer(n int) writesPer {
	f := func(class string) float64 { return float64(w.Get(class)) / float64(n) }
	return writesPer{accounts: f(statements.Accounts), transactions: f(statements.Transactions), others: f(statements.Others)}
}

// writesPer is documents written per finished transfer, by collection.
type writesPer struct{ accounts, transactions, others float64 }

func (w writesPer) total() float64 { return w.accounts + w.transactions + w.others }

// String reads "7.00 (accounts 4.00, transactions 3.00, others 0.00)".
func (w writesPer) String() string {
	return fmt.Sprintf("%.2f (accounts %.2f, transactions %.2f, others %.2f)", w.total(), w.accounts, w.transactions, w.others)
}
