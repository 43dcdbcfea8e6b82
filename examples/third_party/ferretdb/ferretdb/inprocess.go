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

package ferretdb

import (
	"net/netip"

	"github.com/FerretDB/FerretDB/internal/clientconn"
)

// ErrConnClosed is returned by [Conn.Handle] once the connection or
// FerretDB is closed, and with the reply to a request after which the
// server closes the connection.
var ErrConnClosed = clientconn.ErrSessionClosed

// Conn is a client connection to FerretDB in process: [Conn.Handle] takes
// a wire protocol request and returns FerretDB's reply, handled in the
// caller's goroutine by the code that serves a network connection's
// requests, with no socket in between. It keeps a connection's state from
// one request to the next, and its cursors until it is closed.
//
// A Conn serves one client: its Handle calls must not overlap.
type Conn struct {
	s *clientconn.Session
}

// OpenConn opens an in-process connection; peer is the client's address as
// a network connection's remote address would be (the zero AddrPort for
// none). It fails once [FerretDB.Run] has returned. Run ends every Conn
// when its context is done, after the requests being handled.
func (f *FerretDB) OpenConn(peer netip.AddrPort) (*Conn, error) {
	s, err := f.l.NewSession(peer)
	if err != nil {
		return nil, err
	}
	return &Conn{s: s}, nil
}

// Handle handles one request, msg being a whole wire protocol message
// (header included), and returns the whole reply message. A request the
// server answers by closing the connection (an opcode it does not handle,
// or one that made it panic) ends the Conn: its reply, if any, comes with
// ErrConnClosed, and every later call returns ErrConnClosed.
func (c *Conn) Handle(msg []byte) ([]byte, error) { return c.s.Handle(msg) }

// Close ends the connection and closes its cursors. It does not wait for a
// Handle call in progress. It is safe to call more than once.
func (c *Conn) Close() { c.s.Close() }
