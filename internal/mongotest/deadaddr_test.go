package mongotest

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDeadAddr: a connection to DeadAddr's address is refused, and while
// the test runs no listener can take its port (on Unix, where it is held).
func TestDeadAddr(t *testing.T) {
	addr := DeadAddr(t)
	_, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.Error(t, err, "nothing listens at %s", addr)
	if !deadAddrHeld {
		return
	}
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		_ = ln.Close()
	}
	assert.Error(t, err, "the port %s is held", addr)
}
