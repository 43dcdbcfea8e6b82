package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBanks runs the two-bank example end to end and checks what it prints.
func TestBanks(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, nil), out.String())
	s := out.String()
	require.Contains(t, s, "balances: shanghai/A=900 beijing/B=100")
	require.Contains(t, s, "is canceled (insufficient_funds)")
	require.Contains(t, s, "recovery: 1 rolled forward")
	require.Contains(t, s, "balances: shanghai/A=650 beijing/B=350")
	require.Regexp(t, `twopc audit --uri mongodb://[^ ]+/coordinator --ledger shanghai=mongodb://[^ ]+/bank.accounts --ledger beijing=mongodb://[^ ]+/bank.accounts`, s)
}
