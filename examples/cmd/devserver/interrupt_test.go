package main

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc/examples/internal/interrupttest"
)

// TestInterrupt: the command, built as make devserver builds it, exits 0
// when interrupted once it has shut down; make devserver, interrupted as
// Ctrl-C does, reports no error.
func TestInterrupt(t *testing.T) {
	bin := t.TempDir()
	command := interrupttest.BuildCommand(t, bin)
	ready := regexp.MustCompile(`^mongodb://`)
	t.Run("command", func(t *testing.T) {
		out, state := interrupttest.Interrupt(t, ready, command, "-addr", "127.0.0.1:0")
		require.True(t, state.Success(), "exit status 0, not %v:\n%s", state, out)
	})
	t.Run("make", func(t *testing.T) {
		out, state := interrupttest.Interrupt(t, ready, interrupttest.MakeCommand(t, bin, "devserver", "ADDR=127.0.0.1:0")...)
		interrupttest.RequireMakeQuiet(t, out, state)
	})
}
