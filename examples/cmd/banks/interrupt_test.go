package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc/examples/internal/interrupttest"
)

// TestInterrupt: with -serve, the command, built as make banks builds it,
// keeps the banks up until interrupted, then exits 0; make banks
// ARGS=-serve, interrupted as Ctrl-C does, reports no error.
func TestInterrupt(t *testing.T) {
	bin := t.TempDir()
	command := interrupttest.BuildCommand(t, bin)
	ready := regexp.MustCompile(`^both banks stay up until interrupted`)
	t.Run("command", func(t *testing.T) {
		out, state := interrupttest.Interrupt(t, ready, command, "-serve")
		require.True(t, state.Success(), "exit status 0, not %v:\n%s", state, out)
		require.Contains(t, out, "balances: shanghai/A=650 beijing/B=350")
	})
	t.Run("make", func(t *testing.T) {
		out, state := interrupttest.Interrupt(t, ready, interrupttest.MakeCommand(t, bin, "banks", "ARGS=-serve")...)
		interrupttest.RequireMakeQuiet(t, out, state)
	})
}
