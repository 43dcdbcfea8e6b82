package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo end to end and checks the balances it prints and
// that each step is printed with the state it left: the last steps of a
// transfer and of a rollback leave it done and canceled.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out), out.String())
	s := out.String()
	require.Contains(t, s, "transaction")
	require.Contains(t, s, "balances: A=900 B=1100")
	require.Contains(t, s, "is canceled (insufficient_funds)")
	require.Contains(t, s, "recovery: 1 rolled forward")
	require.Contains(t, s, "balances: A=1150 B=850")

	steps := func(pattern string) int {
		return len(regexp.MustCompile(`(?m)^    step `+pattern+`$`).FindAllString(s, -1))
	}
	require.Equal(t, 2, steps(`done +leaves it done`), "transfer 1 and the recovered one end done:\n%s", s)
	require.Equal(t, 1, steps(`canceled +leaves it canceled`), "transfer 2 ends canceled:\n%s", s)
	require.Equal(t, 1, steps(`cancel +leaves it canceling`), s)
	require.Equal(t, 2, steps(`commit +leaves it applied`), "the commit point of transfer 1 and of the recovered one:\n%s", s)
	require.Equal(t, 1, steps(`commit +not made \(the process died\): the transaction stays pending`), s)
	require.Equal(t, 3, steps(`insert +leaves it pending`), s)
}
