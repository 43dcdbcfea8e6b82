package interrupttest

import "testing"

// TestMakeWaitRace: makeWaitRace takes out exactly the lines of GNU make's
// race, as make test met them (cmd/banks, 2026-11-29), and no other
// report of make's.
func TestMakeWaitRace(t *testing.T) {
	out := "both banks stay up until interrupted (Ctrl-C)\n" +
		"make: *** wait: No child processes.  Stop.\n" +
		"make: *** Waiting for unfinished jobs....\n" +
		"make: *** wait: No child processes.  Stop.\n"
	if rest := makeWaitRace.ReplaceAllString(out, ""); rest != "both banks stay up until interrupted (Ctrl-C)\n" {
		t.Errorf("left %q", rest)
	}
	for _, other := range []string{
		"make: *** [Makefile:76: banks] Interrupt\n",
		"make: *** [Makefile:76: banks] Error 1\n",
		"make: *** wait: Interrupted system call.  Stop.\n",
	} {
		if rest := makeWaitRace.ReplaceAllString(other, ""); rest != other {
			t.Errorf("took out %q, leaving %q", other, rest)
		}
	}
}
