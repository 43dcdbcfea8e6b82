package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo end to end and checks the balances it prints.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out), out.String())
	s := out.String()
	require.Contains(t, s, "transaction")
	require.Contains(t, s, "balances: A=900 B=1100")
	require.Contains(t, s, "is canceled (insufficient_funds)")
	require.Contains(t, s, "recovery: 1 rolled forward")
	require.Contains(t, s, "balances: A=1150 B=850")
}
