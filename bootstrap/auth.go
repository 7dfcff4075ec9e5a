package bootstrap

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"
)

// handshakeTimeout bounds the whole authentication exchange on both sides: a
// connection that has not proved itself by then is dropped.
var handshakeTimeout = 10 * time.Second // a variable for tests

// errWrongSecret is the server's refusal and the cause clients report.
var errWrongSecret = errors.New("wrong secret")

// ErrAuth is wrapped by every authentication failure: the store refused the
// client's secret, or the store could not prove it knows the secret.
var ErrAuth = errors.New("authentication failed")

func proof(secret []byte, label string, cnonce, snonce []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("goccl-bootstrap v1 " + label))
	m.Write(cnonce)
	m.Write(snonce)
	return m.Sum(nil)
}

func nonce() []byte {
	b := make([]byte, nonceLen)
	if _, err := rand.Read(b); err != nil {
		panic("bootstrap: crypto/rand: " + err.Error())
	}
	return b
}

func writeFrame(w io.Writer, f frame) error {
	_, err := w.Write(appendFrame(nil, f))
	return err
}

// expect reads one handshake frame of type typ. An Error frame from the peer
// is returned as its message wrapped in errRefused.
func expect(rw io.Reader, typ byte) ([]byte, error) {
	f, err := readFrame(rw, 4+maxErrMessage)
	if err != nil {
		return nil, err
	}
	if f.typ == typeError {
		s, err := decodeResponse(f)
		if err != nil {
			return nil, err
		}
		return nil, &refusedError{msg: s.msg}
	}
	if f.typ != typ || len(f.payload) != nonceLen {
		return nil, fmt.Errorf("%w: got type %d (%d bytes) in handshake, want type %d", errFrame, f.typ, len(f.payload), typ)
	}
	return f.payload, nil
}

// refusedError is the server's stated reason for refusing a client.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }
func (e *refusedError) Unwrap() error { return ErrAuth }

// clientHandshake authenticates the client to the server and the server to
// the client. The caller sets deadlines.
func clientHandshake(rw io.ReadWriter, secret []byte) error {
	cn := nonce()
	if err := writeFrame(rw, frame{typ: typeHello, payload: cn}); err != nil {
		return err
	}
	sn, err := expect(rw, typeChallenge)
	if err != nil {
		return err
	}
	if err := writeFrame(rw, frame{typ: typeProof, payload: proof(secret, "client", cn, sn)}); err != nil {
		return err
	}
	smac, err := expect(rw, typeWelcome)
	if err != nil {
		return err
	}
	if !hmac.Equal(smac, proof(secret, "server", cn, sn)) {
		return fmt.Errorf("%w: the store did not prove it knows the secret (not a genuine goccl store?)", ErrAuth)
	}
	return nil
}

// serverHandshake authenticates a client. On a wrong proof it tells the
// client so and returns errWrongSecret. The caller sets deadlines.
func serverHandshake(rw io.ReadWriter, secret []byte) error {
	f, err := readFrame(rw, nonceLen)
	if err != nil {
		if errors.Is(err, errFrame) { // e.g. another protocol version
			refuse(rw, err.Error())
		}
		return err
	}
	if f.typ != typeHello || len(f.payload) != nonceLen {
		refuse(rw, "expected authentication")
		return fmt.Errorf("%w: type %d before authentication", errFrame, f.typ)
	}
	cn := f.payload
	sn := nonce()
	if err := writeFrame(rw, frame{typ: typeChallenge, payload: sn}); err != nil {
		return err
	}
	f, err = readFrame(rw, nonceLen)
	if err != nil {
		return err
	}
	if f.typ != typeProof || len(f.payload) != macLen {
		refuse(rw, "expected authentication")
		return fmt.Errorf("%w: type %d instead of proof", errFrame, f.typ)
	}
	if !hmac.Equal(f.payload, proof(secret, "client", cn, sn)) {
		refuse(rw, errWrongSecret.Error())
		return errWrongSecret
	}
	return writeFrame(rw, frame{typ: typeWelcome, payload: proof(secret, "server", cn, sn)})
}

func refuse(w io.Writer, msg string) {
	_ = writeFrame(w, encodeResponse(response{typ: typeError, msg: msg}))
}
