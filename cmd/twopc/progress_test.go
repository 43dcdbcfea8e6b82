package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/twopc/twopc"
)

func TestProgress(t *testing.T) {
	every := progressEvery
	progressEvery = time.Millisecond
	defer func() { progressEvery = every }()

	var steps stepCounter
	require.Equal(t, "no step yet", steps.String())
	for range 3 {
		require.NoError(t, steps.hook(context.Background(), twopc.StepSettle, nil))
	}
	require.NoError(t, steps.hook(context.Background(), twopc.StepTakeover, nil))

	w := newLineWriter()
	p := startProgress(w, false, "recover", steps.String)
	line := <-w.lines
	p.end()
	require.Contains(t, line, "recover: ")
	require.Contains(t, line, "steps: settle 3, takeover 1")

	steps.reset()
	require.Equal(t, "no step yet", steps.String())
	quiet := startProgress(w, true, "recover", steps.String)
	require.Nil(t, quiet)
	quiet.end()
}
