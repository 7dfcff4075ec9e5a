package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// ErrClosed is returned by calls on a Client after Close.
var ErrClosed = errors.New("bootstrap: client closed")

// ErrStoreLost is wrapped by the errors of calls on a Client whose
// connection to the store ended other than by Close: the store (or the
// rank hosting it) went away, or the link to it failed.
var ErrStoreLost = errors.New("connection to the store lost")

// storeLost is the cause a Client's connection ended with.
type storeLost struct {
	addr string
	err  error
}

func (e *storeLost) Error() string {
	return fmt.Sprintf("bootstrap: connection to store %s lost: %v", e.addr, e.err)
}
func (e *storeLost) Unwrap() []error { return []error{ErrStoreLost, e.err} }

// Client is one connection to the store. Its methods may be called from
// many goroutines at once; requests are multiplexed over the connection.
// When the connection breaks or the server closes, every pending and later
// call fails with an error naming the store.
type Client struct {
	addr string
	conn net.Conn
	wmu  sync.Mutex
	done chan struct{} // closed when the connection is finished

	mu      sync.Mutex
	nextID  uint32
	pending map[uint32]chan response
	err     error // why the connection finished
}

// Dial connects to the store at addr and authenticates with secret. It
// retries refused and failed connections with backoff until ctx is done, so
// ranks may start before the store does. A store that refuses the secret,
// or does not prove it knows it, fails at once with an error wrapping
// ErrAuth.
func Dial(ctx context.Context, addr string, secret []byte) (*Client, error) {
	if len(secret) == 0 {
		return nil, fmt.Errorf("bootstrap: dial store %s: no secret", addr)
	}
	backoff := 10 * time.Millisecond
	var last error
	answered := 0 // connections made whose handshake failed
	for {
		c, err := dialOnce(ctx, addr, secret)
		if err == nil {
			return c, nil
		}
		var refused *refusedError
		if errors.As(err, &refused) {
			return nil, fmt.Errorf("bootstrap: store %s refused authentication: %w", addr, err)
		}
		if errors.Is(err, ErrAuth) {
			return nil, fmt.Errorf("bootstrap: store %s: %w", addr, err)
		}
		if errors.Is(err, errFrame) {
			return nil, fmt.Errorf("bootstrap: store %s: not a goccl store: %w", addr, err)
		}
		last = err
		var hs *handshakeError
		if errors.As(err, &hs) {
			answered++
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			if answered > 0 && errors.As(last, &hs) {
				// Connected, but no store answered: a foreign server on the
				// port (torchrun's own store, another service), or a store
				// that hangs. Said plainly, not as a bare read error.
				return nil, fmt.Errorf("bootstrap: dial store %s: %w: a server there accepted %d connection(s) but %s: not a goccl store (another program on the port) or a store that hangs", addr, ctx.Err(), answered, hs.what())
			}
			return nil, fmt.Errorf("bootstrap: dial store %s: %w (last error: %v)", addr, ctx.Err(), last)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func dialOnce(ctx context.Context, addr string, secret []byte) (*Client, error) {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tuneConn(conn)
	deadline, _ := dctx.Deadline()
	_ = conn.SetDeadline(deadline)
	if err := clientHandshake(conn, secret); err != nil {
		conn.Close()
		if errors.Is(err, ErrAuth) || errors.Is(err, errFrame) || errors.As(err, new(*refusedError)) {
			return nil, err
		}
		return nil, &handshakeError{err}
	}
	_ = conn.SetDeadline(time.Time{})
	c := &Client{
		addr:    addr,
		conn:    conn,
		done:    make(chan struct{}),
		pending: make(map[uint32]chan response),
	}
	go c.readLoop()
	return c, nil
}

// handshakeError is a failure of the handshake on a connection made: the
// server closed it or did not answer in time.
type handshakeError struct{ err error }

func (e *handshakeError) Error() string { return "handshake: " + e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

// what says how the server failed the handshake.
func (e *handshakeError) what() string {
	var ne net.Error
	if errors.As(e.err, &ne) && ne.Timeout() {
		return fmt.Sprintf("did not answer goccl's handshake (%v)", e.err)
	}
	return fmt.Sprintf("closed them during goccl's handshake (%v)", e.err)
}

// Addr is the store's address as dialled.
func (c *Client) Addr() string { return c.addr }

// LocalIP is the local address of the connection to the store: the address
// of this host on the network the store is reached through, which is the one
// peers can reach this rank on.
func (c *Client) LocalIP() net.IP {
	if a, ok := c.conn.LocalAddr().(*net.TCPAddr); ok {
		return a.IP
	}
	return nil
}

// Close closes the connection. Pending calls return ErrClosed.
//
// It half-closes first and reads what the store still sends (answers to
// calls that ended just before, such as watches of keys other ranks set as
// they close) until the store closes its side, for at most closeDrain: a
// socket closed with unread data resets the connection, which the store
// logs as a dropped connection.
func (c *Client) Close() error {
	c.mu.Lock()
	open := c.err == nil
	var pending map[uint32]chan response
	if open {
		c.err, pending, c.pending = ErrClosed, c.pending, nil
	}
	c.mu.Unlock()
	for _, ch := range pending {
		close(ch)
	}
	if open {
		// On purpose: the store drops this connection's wills.
		_ = c.write(frame{typ: typeBye})
	}
	if hc, ok := c.conn.(interface{ CloseWrite() error }); ok && open && hc.CloseWrite() == nil {
		t := time.NewTimer(closeDrain)
		select {
		case <-c.done: // the store closed its side; everything was read
		case <-t.C:
		}
		t.Stop()
	}
	c.conn.Close()
	<-c.done
	return nil
}

// closeDrain bounds how long Close waits for the store to close its side.
const closeDrain = time.Second

// finish records why the connection ended (the first cause wins), closes it
// and wakes every pending call.
func (c *Client) finish(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	c.err = err
	pending := c.pending
	c.pending = nil
	c.mu.Unlock()
	c.conn.Close()
	for _, ch := range pending {
		close(ch)
	}
}

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		f, err := readFrame(c.conn, maxPayload(typeValue))
		if err == nil {
			var s response
			s, err = decodeResponse(f)
			if err == nil {
				c.mu.Lock()
				ch := c.pending[s.id]
				delete(c.pending, s.id)
				c.mu.Unlock()
				if ch != nil {
					ch <- s
				}
				continue
			}
		}
		c.finish(&storeLost{c.addr, err})
		return
	}
}

// call sends a request and waits for its reply, ctx, or the connection's
// end.
func (c *Client) call(ctx context.Context, op string, q request) (response, error) {
	if err := ctx.Err(); err != nil {
		return response{}, fmt.Errorf("bootstrap: %s: %w", op, err)
	}
	ch := make(chan response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return response{}, fmt.Errorf("bootstrap: %s: %w", op, err)
	}
	c.nextID++
	q.id = c.nextID
	c.pending[q.id] = ch
	c.mu.Unlock()

	if err := c.write(encodeRequest(q)); err != nil {
		c.finish(&storeLost{c.addr, err})
	}
	select {
	case s, ok := <-ch:
		if !ok {
			return response{}, fmt.Errorf("bootstrap: %s: %w", op, c.cause())
		}
		if s.typ == typeError {
			return response{}, fmt.Errorf("bootstrap: %s: store %s: %s", op, c.addr, s.msg)
		}
		return s, nil
	case <-ctx.Done():
		c.mu.Lock()
		_, still := c.pending[q.id]
		delete(c.pending, q.id)
		c.mu.Unlock()
		if still {
			_ = c.write(frame{typ: typeCancel, id: q.id})
		}
		return response{}, fmt.Errorf("bootstrap: %s: %w", op, ctx.Err())
	}
}

func (c *Client) cause() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) write(f frame) error {
	b := appendFrame(nil, f)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.conn.Write(b)
	return err
}

func checkKey(op, key string) error {
	if len(key) > MaxKeyLen {
		return fmt.Errorf("bootstrap: %s: key of %d bytes exceeds %d", op, len(key), MaxKeyLen)
	}
	return nil
}

// Set stores value under key, replacing any earlier value, and wakes the
// calls waiting for key. It blocks until the store has the value.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	op := fmt.Sprintf("set %q", key)
	if err := checkKey(op, key); err != nil {
		return err
	}
	if len(value) > MaxValueLen {
		return fmt.Errorf("bootstrap: %s: value of %d bytes exceeds %d", op, len(value), MaxValueLen)
	}
	_, err := c.call(ctx, op, request{typ: typeSet, key: key, value: value})
	return err
}

// Will asks the store to set key to value when this connection ends for
// any reason but Close: the process exited without closing the client or
// was killed, or its host or link failed (found by the store's keepalive
// probes). Ranks that wait for a peer watch its will's key and fail at
// once instead of at their timeout, under any launcher. A connection
// holds up to 64 wills, of at most 4 KiB each; a later Will of the same
// key replaces the value. Will removes the key's current value, if any (an
// earlier connection's will: this one is here). It blocks until the store
// has the will.
func (c *Client) Will(ctx context.Context, key string, value []byte) error {
	op := fmt.Sprintf("will %q", key)
	if err := checkKey(op, key); err != nil {
		return err
	}
	if len(value) > maxWillValue {
		return fmt.Errorf("bootstrap: %s: value of %d bytes exceeds %d", op, len(value), maxWillValue)
	}
	_, err := c.call(ctx, op, request{typ: typeWill, key: key, value: value})
	return err
}

// Get returns the value of key, blocking until some client sets it, ctx is
// done or the connection ends. The caller owns the returned slice.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	op := fmt.Sprintf("get %q", key)
	if err := checkKey(op, key); err != nil {
		return nil, err
	}
	s, err := c.call(ctx, op, request{typ: typeGet, key: key})
	if err != nil {
		return nil, err
	}
	return s.value, nil
}

// Wait blocks until every key exists, ctx is done or the connection ends.
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	return c.multi(ctx, "wait for", typeWait, keys)
}

// Delete removes keys (absent ones are ignored). Calls blocked on a deleted
// key go on waiting for it to be set again. It blocks until the store has
// removed them.
func (c *Client) Delete(ctx context.Context, keys ...string) error {
	return c.multi(ctx, "delete", typeDelete, keys)
}

// multi sends a command that takes a list of keys, in batches that fit a
// frame.
func (c *Client) multi(ctx context.Context, verb string, typ byte, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), maxWaitKeys)
		batch := keys[:n]
		size := 4
		for i, k := range batch {
			if err := checkKey(verb, k); err != nil {
				return err
			}
			size += 4 + len(k)
			if size > maxWaitFrame {
				batch = batch[:i]
				break
			}
		}
		op := fmt.Sprintf("%s %d keys", verb, len(batch))
		if len(batch) == 1 {
			op = fmt.Sprintf("%s %q", verb, batch[0])
		}
		if _, err := c.call(ctx, op, request{typ: typ, keys: batch}); err != nil {
			return err
		}
		keys = keys[len(batch):]
	}
	return nil
}

// Add atomically adds delta to the integer counter at key (absent counts as
// 0) and returns the new value. The counter is stored as decimal text, so
// Get of a counter returns e.g. "3".
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	op := fmt.Sprintf("add %q", key)
	if err := checkKey(op, key); err != nil {
		return 0, err
	}
	s, err := c.call(ctx, op, request{typ: typeAdd, key: key, delta: delta})
	if err != nil {
		return 0, err
	}
	return s.n, nil
}
