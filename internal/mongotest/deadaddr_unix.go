//go:build unix

package mongotest

import (
	"fmt"
	"syscall"
	"testing"
)

// deadAddrHeld says DeadAddr holds its port here.
const deadAddrHeld = true

// DeadAddr returns a loopback address where nothing listens, and keeps it
// so until tb ends: a connection to it is refused, and no server started
// meanwhile, by this test or one running beside it, can take its port.
// The port is bound by a socket that never listens and does not set
// SO_REUSEADDR, so another bind of it fails (EADDRINUSE) and the kernel
// never hands it out for port 0. A port freed right after it was picked
// (a listener opened and closed) could be taken by a dev server started
// in between, and then the "unreachable" address answered.
func DeadAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		tb.Fatalf("mongotest: a socket to hold a dead port: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatalf("mongotest: binding a dead port: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		tb.Fatalf("mongotest: the dead port's address: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		tb.Fatalf("mongotest: the dead port's address is %T", sa)
	}
	return fmt.Sprintf("127.0.0.1:%d", in4.Port)
}
