package devserver

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// picks returns which of n requests for command the set faults.
func picks(t *testing.T, s *faultSet, command string, n int) []bool {
	t.Helper()
	out := make([]bool, n)
	for i := range out {
		_, out[i] = s.pick(command)
	}
	return out
}

func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func TestProbabilityIsSeeded(t *testing.T) {
	rule := Fault{Command: "update", Kind: DropAfterForward, Probability: 0.3, Seed: 7}
	var runs [2][]bool
	for i := range runs {
		s := newFaultSet(0) // the rule's own seed must decide, not the set's
		_, err := s.add(rule)
		require.NoError(t, err)
		runs[i] = picks(t, s, "update", 1000)
	}
	assert.Equal(t, runs[0], runs[1], "same seed, same faults")
	assert.InDelta(t, 300, count(runs[0]), 60)

	a, b := newFaultSet(3), newFaultSet(3)
	rule.Seed = 0
	for _, s := range []*faultSet{a, b} {
		_, err := s.add(rule)
		require.NoError(t, err)
	}
	assert.Equal(t, picks(t, a, "update", 200), picks(t, b, "update", 200), "same front seed, same faults")
}

func TestCountCountsApplications(t *testing.T) {
	s := newFaultSet(1)
	_, err := s.add(Fault{Kind: DropBeforeForward, Probability: 0.5, Count: 10})
	require.NoError(t, err)
	got := picks(t, s, "insert", 1000)
	assert.Equal(t, 10, count(got))
	assert.Empty(t, s.list())
}

func TestRulesApplyInOrder(t *testing.T) {
	s := newFaultSet(1)
	first, err := s.add(Fault{Command: "update", Kind: Delay, Delay: 1, Count: 1})
	require.NoError(t, err)
	_, err = s.add(Fault{Kind: DropAfterForward})
	require.NoError(t, err)

	f, ok := s.pick("update")
	require.True(t, ok)
	assert.Equal(t, Delay, f.Kind)
	f, ok = s.pick("update")
	require.True(t, ok)
	assert.Equal(t, DropAfterForward, f.Kind, "the first rule is exhausted")
	_, ok = s.pick("hello")
	assert.False(t, ok, "catch-all rules spare handshake commands")

	assert.False(t, s.remove(first), "exhausted rules are gone")
	s.clear()
	_, ok = s.pick("update")
	assert.False(t, ok)
}

func TestKindJSON(t *testing.T) {
	for _, k := range []Kind{DropBeforeForward, DropAfterForward, Delay} {
		b, err := json.Marshal(k)
		require.NoError(t, err)
		var back Kind
		require.NoError(t, json.Unmarshal(b, &back))
		assert.Equal(t, k, back)
	}
	var k Kind
	assert.Error(t, json.Unmarshal([]byte(`"explode"`), &k))
	_, err := json.Marshal(Kind(0))
	assert.Error(t, err)
}
