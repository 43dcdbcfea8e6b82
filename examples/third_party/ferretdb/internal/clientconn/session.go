// Copyright 2021 FerretDB Inc.
//
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
//     http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

// twopc's dev server: this file is new (see examples/third_party/README.md).

package clientconn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	"github.com/FerretDB/wire"

	"github.com/FerretDB/FerretDB/internal/clientconn/conninfo"
	"github.com/FerretDB/FerretDB/internal/util/lazyerrors"
	"github.com/FerretDB/FerretDB/internal/util/logging"
)

// ErrSessionClosed is returned by [Session.Handle] once the session or its
// listener is closed, or after a request that closes the connection.
var ErrSessionClosed = errors.New("clientconn: session closed")

// sessions is what a Listener keeps of its in-process sessions.
type sessions struct {
	mu     sync.Mutex
	closed bool           // set by Run on its way out; protected by mu
	busy   sync.WaitGroup // requests being handled; Add under mu while !closed

	ctx    context.Context // parent of every session's context; canceled by Run on its way out
	cancel context.CancelFunc
}

// Session is one client connection served in process: each request is
// handled in the goroutine of the [Session.Handle] call, by the same code a
// network connection's goroutine runs (conn.route), with no socket between.
// It keeps a connection's state (its conninfo: authentication, handshake
// metadata) from one request to the next, and its cursors live until it is
// closed, as a network connection's do until it ends.
//
// A Session is for one client at a time: its Handle calls must not overlap,
// as a network connection's requests do not.
type Session struct {
	l      *Listener
	c      *conn
	ctx    context.Context
	cancel context.CancelCauseFunc

	peer netip.AddrPort

	mu     sync.Mutex
	closed bool // by Close, or by a request that closes the connection
}

// NewSession opens an in-process session; peer is the client's address, as
// a network connection's remote address (the zero AddrPort for none, as for
// a Unix socket). It fails once the listener has stopped.
func (l *Listener) NewSession(peer netip.AddrPort) (*Session, error) {
	l.sess.mu.Lock()
	defer l.sess.mu.Unlock()
	if l.sess.closed {
		return nil, ErrSessionClosed
	}

	c, err := newConn(&newConnOpts{
		mode:        l.Mode,
		l:           logging.WithName(l.Logger, "// in-process "+peer.String()+" "),
		handler:     l.Handler,
		connMetrics: l.Metrics.ConnMetrics,
	})
	if err != nil {
		return nil, lazyerrors.Error(err)
	}
	if c.proxy != nil { // proxy modes need a network connection's loop
		c.proxy.Close()
		return nil, lazyerrors.Errorf("in-process sessions serve mode %q only", NormalMode)
	}

	connInfo := conninfo.New()
	connInfo.Peer = peer
	ctx, cancel := context.WithCancelCause(conninfo.Ctx(l.sess.ctx, connInfo))
	l.ll.InfoContext(ctx, "Connection started", slog.String("conn", "in-process "+peer.String()))
	return &Session{l: l, c: c, ctx: ctx, cancel: cancel, peer: peer}, nil
}

// Handle handles one request, msg being a whole wire protocol message
// (header included), and returns the whole reply message. A request the
// server answers by closing the connection (an opcode it does not handle)
// returns its reply with ErrSessionClosed, and every later call returns
// ErrSessionClosed alone; so does a call after Close or after the listener
// stopped. A request that makes the handler panic returns an error
// wrapping ErrSessionClosed and closes the session, as it ends a network
// connection.
func (s *Session) Handle(msg []byte) (reply []byte, err error) {
	sess := &s.l.sess
	sess.mu.Lock()
	if sess.closed {
		sess.mu.Unlock()
		return nil, ErrSessionClosed
	}
	sess.busy.Add(1)
	sess.mu.Unlock()
	defer sess.busy.Done()

	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrSessionClosed
	}

	defer func() {
		if p := recover(); p != nil {
			s.c.l.LogAttrs(s.ctx, logging.LevelDPanic, fmt.Sprint(p))
			s.close(errors.New("panic"))
			reply, err = nil, fmt.Errorf("%w: panic: %v", ErrSessionClosed, p)
		}
	}()

	// The smallest buffer: ReadMessage's reads of the body go straight to
	// msg.
	reqHeader, reqBody, err := wire.ReadMessage(bufio.NewReaderSize(bytes.NewReader(msg), 16))
	if err != nil {
		return nil, lazyerrors.Error(err)
	}

	ctx := s.ctx
	if s.c.l.Enabled(ctx, slog.LevelDebug) {
		s.c.l.DebugContext(ctx, "Request header: "+reqHeader.String())
		s.c.l.DebugContext(ctx, "Request message:\n"+reqBody.String()+"\n")
	}

	resHeader, resBody, closeConn := s.c.route(ctx, reqHeader, reqBody)
	s.c.logResponse(ctx, "Response", resHeader, resBody, closeConn)
	if resHeader == nil || resBody == nil {
		panic("no response to send to client")
	}

	body, err := resBody.MarshalBinary()
	if err != nil {
		return nil, lazyerrors.Error(err)
	}
	if int(resHeader.MessageLength) != wire.MsgHeaderLen+len(body) {
		return nil, lazyerrors.Errorf("reply of %d bytes, its header says %d", wire.MsgHeaderLen+len(body), resHeader.MessageLength)
	}
	reply = make([]byte, wire.MsgHeaderLen, wire.MsgHeaderLen+len(body))
	binary.LittleEndian.PutUint32(reply[0:4], uint32(resHeader.MessageLength))
	binary.LittleEndian.PutUint32(reply[4:8], uint32(resHeader.RequestID))
	binary.LittleEndian.PutUint32(reply[8:12], uint32(resHeader.ResponseTo))
	binary.LittleEndian.PutUint32(reply[12:16], uint32(resHeader.OpCode))
	reply = append(reply, body...)

	if closeConn {
		s.close(errors.New("fatal error"))
		return reply, ErrSessionClosed
	}
	return reply, nil
}

// Close ends the session: its cursors are closed, and later Handle calls
// fail. It does not wait for a Handle call in progress. It is safe to call
// more than once.
func (s *Session) Close() {
	s.close(ErrSessionClosed)
}

func (s *Session) close(cause error) {
	s.mu.Lock()
	was := s.closed
	s.closed = true
	s.mu.Unlock()
	s.cancel(cause)
	if !was {
		s.l.ll.Info("Connection stopped", slog.String("conn", "in-process "+s.peer.String()), logging.Error(cause))
	}
}

// stopSessions ends every session and waits for the requests being handled;
// Run calls it before it closes the handler.
func (l *Listener) stopSessions() {
	l.sess.cancel()
	l.sess.mu.Lock()
	l.sess.closed = true
	l.sess.mu.Unlock()
	l.sess.busy.Wait()
}
