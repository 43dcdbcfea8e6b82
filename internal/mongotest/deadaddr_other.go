//go:build !unix

package mongotest

import (
	"net"
	"testing"
)

// deadAddrHeld says DeadAddr does not hold its port here.
const deadAddrHeld = false

// DeadAddr returns a loopback address where nothing listens: a port a
// listener was given and closed at once. Unlike the Unix version, the
// port is not held: a server started right after may take it.
func DeadAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("mongotest: picking a dead port: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		tb.Fatalf("mongotest: picking a dead port: %v", err)
	}
	return addr
}
