package bootstrap

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
)

// Timeouts that keep a misbehaving client from holding server resources.
const (
	// frameTimeout bounds reading the rest of a frame once its first byte
	// has arrived.
	frameTimeout = 60 * time.Second
	// writeTimeout bounds writing one reply; a client that does not read is
	// dropped.
	writeTimeout = 30 * time.Second
)

// A ServerOption configures a Server.
type ServerOption func(*Server)

// WithLogger sets where the server reports refused and dropped connections.
// The default is slog.Default(); pass a logger with a discarding handler to
// silence it.
func WithLogger(l *slog.Logger) ServerOption {
	return func(s *Server) {
		if l != nil {
			s.log = l
		}
	}
}

// Server is the key-value store that ranks meet at. Any number of clients
// may connect; each must prove knowledge of the secret first. Values live
// until they are deleted or the server closes.
type Server struct {
	ln     net.Listener
	secret []byte
	log    *slog.Logger
	warns  *connWarnings // rate-limited per-connection warnings
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	data    map[string][]byte
	waiters map[string]map[*waiter]struct{}
	conns   map[*serverConn]struct{}
	authed  int           // authenticated connections open
	joins   int           // authenticated connections ever
	drained chan struct{} // closed and replaced when authed drops to 0
}

type serverConn struct {
	c       net.Conn
	wmu     sync.Mutex
	pending map[uint32]*waiter // guarded by Server.mu
	// wills are set when the connection ends, unless the client said
	// bye first (guarded by Server.mu; see Client.Will).
	wills map[string][]byte
	bye   bool
}

// waiter is a Get or Wait that is blocked until keys exist.
type waiter struct {
	conn    *serverConn
	id      uint32
	typ     byte     // typeGet or typeWait
	keys    []string // keys still missing
	missing int
}

// NewServer listens on addr (host:port; port 0 picks a free one) and serves
// the store until Close. secret must not be empty.
func NewServer(addr string, secret []byte, opts ...ServerOption) (*Server, error) {
	if len(secret) == 0 {
		return nil, errors.New("bootstrap: store needs a non-empty secret")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bootstrap: store listen on %s: %w", addr, err)
	}
	s := &Server{
		ln:      ln,
		secret:  append([]byte(nil), secret...),
		log:     slog.Default(),
		data:    make(map[string][]byte),
		waiters: make(map[string]map[*waiter]struct{}),
		conns:   make(map[*serverConn]struct{}),
		drained: make(chan struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	s.warns = newConnWarnings(s.log)
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the address the server listens on, host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server at once: it stops listening and closes every
// connection, so clients' pending and later calls fail. It waits for the
// server's goroutines to finish (each is bounded by a write timeout), then
// logs the counts of warnings it held back (see connWarnings).
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	err := s.ln.Close()
	if errors.Is(err, net.ErrClosed) { // by Shutdown
		err = nil
	}
	for c := range s.conns {
		c.c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.warns.stop()
	return err
}

// joined is the number of connections that have authenticated.
func (s *Server) joined() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.joins
}

// Shutdown stops accepting connections, waits until every authenticated
// client has disconnected or ctx is done, then closes the server.
func (s *Server) Shutdown(ctx context.Context) error {
	_ = s.ln.Close()
	for {
		s.mu.Lock()
		n, drained := s.authed, s.drained
		s.mu.Unlock()
		if n == 0 {
			return s.Close()
		}
		select {
		case <-drained:
		case <-ctx.Done():
			return s.Close()
		}
	}
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.warns.accept.warn(s.Addr(), "bootstrap: store accept", "err", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		sc := &serverConn{c: c, pending: make(map[uint32]*waiter)}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(sc)
	}
}

func (s *Server) serve(sc *serverConn) {
	defer s.wg.Done()
	remote := sc.c.RemoteAddr().String()
	host := hostOf(sc.c.RemoteAddr())
	authed := false
	defer func() {
		sc.c.Close()
		s.mu.Lock()
		delete(s.conns, sc)
		for _, w := range sc.pending {
			s.removeWaiterLocked(w)
		}
		if !sc.bye && !s.closed {
			// The client died, or its host or link failed: tell the
			// clients that watch for it.
			for k, v := range sc.wills {
				s.setLocked(k, v)
			}
		}
		if authed {
			s.authed--
			if s.authed == 0 {
				close(s.drained)
				s.drained = make(chan struct{})
			}
		}
		s.mu.Unlock()
	}()
	tuneConn(sc.c)
	_ = sc.c.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := serverHandshake(sc.c, s.secret); err != nil {
		if errors.Is(err, errWrongSecret) {
			s.warns.wrongSecret.warn(host, "bootstrap: store refused connection: wrong secret", "remote", remote)
			s.noteRefusal(remote)
		} else if !errors.Is(err, io.EOF) {
			s.warns.unauthenticated.warn(host, "bootstrap: store dropped unauthenticated connection", "remote", remote, "err", err)
		}
		return
	}
	_ = sc.c.SetDeadline(time.Time{})
	s.mu.Lock()
	authed = true
	s.authed++
	s.joins++
	s.mu.Unlock()

	for {
		f, err := s.readRequestFrame(sc.c)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.warns.dropped.warn(host, "bootstrap: store dropped connection", "remote", remote, "err", err)
			}
			return
		}
		q, err := decodeRequest(f)
		if err != nil {
			s.warns.dropped.warn(host, "bootstrap: store dropped connection", "remote", remote, "err", err)
			return
		}
		if reply, ok := s.handle(sc, q); ok {
			if err := sc.send(reply); err != nil {
				return
			}
		}
	}
}

// readRequestFrame waits as long as needed for the first byte of a frame,
// then at most frameTimeout for the rest.
func (s *Server) readRequestFrame(c net.Conn) (frame, error) {
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return frame{}, err
	}
	_ = c.SetReadDeadline(time.Now().Add(frameTimeout))
	f, err := readFrame(io.MultiReader(bytes.NewReader(first[:]), c), maxPayload(typeSet))
	_ = c.SetReadDeadline(time.Time{})
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return f, err
}

func (sc *serverConn) send(f frame) error {
	b := appendFrame(nil, f)
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	_ = sc.c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := sc.c.Write(b)
	if err != nil {
		sc.c.Close()
	}
	return err
}

func errorReply(id uint32, format string, args ...any) frame {
	return encodeResponse(response{typ: typeError, id: id, msg: fmt.Sprintf(format, args...)})
}

// handle executes one command. It returns the immediate reply, or ok=false
// when the reply comes later (a blocked Get or Wait) or never (Cancel).
func (s *Server) handle(sc *serverConn, q request) (reply frame, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.typ == typeCancel {
		if w := sc.pending[q.id]; w != nil {
			s.removeWaiterLocked(w)
		}
		return frame{}, false
	}
	if q.typ == typeBye {
		sc.bye = true
		return frame{}, false
	}
	if _, dup := sc.pending[q.id]; dup {
		return errorReply(q.id, "request id %d already pending", q.id), true
	}
	switch q.typ {
	case typeSet:
		s.setLocked(q.key, q.value)
		return encodeResponse(response{typ: typeOK, id: q.id}), true
	case typeWill:
		if _, ok := sc.wills[q.key]; !ok && len(sc.wills) >= maxWills {
			return errorReply(q.id, "will %q: this connection holds %d wills already", q.key, maxWills), true
		}
		if sc.wills == nil {
			sc.wills = make(map[string][]byte)
		}
		sc.wills[q.key] = q.value
		delete(s.data, q.key) // the client is here: not gone (an earlier one's will)
		return encodeResponse(response{typ: typeOK, id: q.id}), true
	case typeAdd:
		var n int64
		if v, ok := s.data[q.key]; ok {
			var err error
			n, err = strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return errorReply(q.id, "add %q: value is not an integer", q.key), true
			}
		}
		n += q.delta
		s.setLocked(q.key, strconv.AppendInt(nil, n, 10))
		return encodeResponse(response{typ: typeInt, id: q.id, n: n}), true
	case typeGet:
		if v, ok := s.data[q.key]; ok {
			return encodeResponse(response{typ: typeValue, id: q.id, value: v}), true
		}
		s.addWaiterLocked(&waiter{conn: sc, id: q.id, typ: typeGet, keys: []string{q.key}, missing: 1})
		return frame{}, false
	case typeDelete:
		for _, k := range q.keys {
			delete(s.data, k)
		}
		return encodeResponse(response{typ: typeOK, id: q.id}), true
	case typeWait:
		var missing []string
		for _, k := range q.keys {
			if _, ok := s.data[k]; !ok {
				missing = append(missing, k)
			}
		}
		if len(missing) == 0 {
			return encodeResponse(response{typ: typeOK, id: q.id}), true
		}
		// A key listed twice counts once per listing; setLocked
		// decrements once per registration, so this stays consistent.
		s.addWaiterLocked(&waiter{conn: sc, id: q.id, typ: typeWait, keys: missing, missing: len(missing)})
		return frame{}, false
	}
	return errorReply(q.id, "unknown command %d", q.typ), true
}

func (s *Server) addWaiterLocked(w *waiter) {
	w.conn.pending[w.id] = w
	for _, k := range w.keys {
		m := s.waiters[k]
		if m == nil {
			m = make(map[*waiter]struct{})
			s.waiters[k] = m
		}
		if _, ok := m[w]; ok {
			w.missing-- // duplicate key in one Wait
			continue
		}
		m[w] = struct{}{}
	}
}

func (s *Server) removeWaiterLocked(w *waiter) {
	delete(w.conn.pending, w.id)
	for _, k := range w.keys {
		if m := s.waiters[k]; m != nil {
			delete(m, w)
			if len(m) == 0 {
				delete(s.waiters, k)
			}
		}
	}
}

// refusedKey counts the connections the store refused for a wrong secret
// (an integer, as Add keeps it), and refusedFromKey holds the address of
// the last: a rank whose secret differs cannot join to say so, and the
// ranks that wait for it name it in their timeout error (Bootstrap's
// refusals). Only authenticated clients read them; a flood of refused
// connections only rewrites the two keys.
const (
	refusedKey     = "goccl/store/refused"
	refusedFromKey = "goccl/store/refused-from"
)

// noteRefusal records a connection refused for a wrong secret, from
// remote.
func (s *Server) noteRefusal(remote string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, _ := strconv.ParseInt(string(s.data[refusedKey]), 10, 64)
	s.setLocked(refusedFromKey, []byte(remote))
	s.setLocked(refusedKey, strconv.AppendInt(nil, n+1, 10))
}

// setLocked stores a value and answers the waiters it completes. Replies go
// out on their own goroutines so one slow client cannot stall this one.
func (s *Server) setLocked(key string, value []byte) {
	s.data[key] = value
	m := s.waiters[key]
	delete(s.waiters, key)
	for w := range m {
		w.missing--
		if w.missing > 0 {
			continue
		}
		s.removeWaiterLocked(w)
		var f frame
		if w.typ == typeGet {
			f = encodeResponse(response{typ: typeValue, id: w.id, value: value})
		} else {
			f = encodeResponse(response{typ: typeOK, id: w.id})
		}
		s.wg.Add(1)
		go func(c *serverConn) {
			defer s.wg.Done()
			_ = c.send(f)
		}(w.conn)
	}
}
