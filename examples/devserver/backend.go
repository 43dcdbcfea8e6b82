package devserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/FerretDB/FerretDB/ferretdb"
)

// backendConn is one client connection's way to the backend: the front
// sends it a request message and receives the reply messages, one after
// another, as on a connection. Its methods are called by one goroutine at
// a time (the client connection's).
type backendConn interface {
	// send sends one whole request message.
	send(msg []byte) error
	// receive returns the next whole reply message.
	receive() ([]byte, error)
	// Close ends the connection; a send or receive in progress on a
	// network connection fails. The front's Close calls it.
	io.Closer
}

// dialer opens a backendConn for the client connection client.
type dialer func(ctx context.Context, client net.Conn) (backendConn, error)

// tcpBackend is a backend reached over TCP (NewFront's).
type tcpBackend struct{ c net.Conn }

func (b tcpBackend) send(msg []byte) error {
	_, err := b.c.Write(msg)
	return err
}

func (b tcpBackend) receive() ([]byte, error) { return readMessage(b.c) }

func (b tcpBackend) Close() error { return b.c.Close() }

// dialTCP returns the dialer of the MongoDB server at addr ("host:port").
func dialTCP(addr string) dialer {
	return func(ctx context.Context, _ net.Conn) (backendConn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("dialing backend %s: %w", addr, err)
		}
		return tcpBackend{c}, nil
	}
}

// inProcessBackend is a FerretDB connection in process (the Server's):
// send hands the request to FerretDB in the calling goroutine and keeps
// its reply for receive. FerretDB answers every request with one reply
// (it sends no moreToCome replies), so a receive takes the one reply the
// last send got.
type inProcessBackend struct {
	c     *ferretdb.Conn
	reply []byte // the last send's, until received
}

// errNoReply is a receive with no reply waiting: a front bug.
var errNoReply = errors.New("devserver: no reply waiting from the in-process backend")

func (b *inProcessBackend) send(msg []byte) error {
	reply, err := b.c.Handle(msg)
	if err != nil {
		return err
	}
	b.reply = reply
	return nil
}

func (b *inProcessBackend) receive() ([]byte, error) {
	reply := b.reply
	if reply == nil {
		return nil, errNoReply
	}
	b.reply = nil
	return reply, nil
}

func (b *inProcessBackend) Close() error {
	b.c.Close()
	return nil
}

// dialInProcess returns the dialer of f's in-process connections, each
// named by its client's address.
func dialInProcess(f *ferretdb.FerretDB) dialer {
	return func(_ context.Context, client net.Conn) (backendConn, error) {
		peer, _ := netip.ParseAddrPort(client.RemoteAddr().String()) // the zero AddrPort if not an IP address
		c, err := f.OpenConn(peer)
		if err != nil {
			return nil, fmt.Errorf("opening an in-process connection to FerretDB: %w", err)
		}
		return &inProcessBackend{c: c}, nil
	}
}
