package comm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goccl/goccl/bootstrap"
	"github.com/goccl/goccl/collectives"
)

// keyValue is the part of the bootstrap store a communicator uses to learn
// a peer's side of a mismatch.
type keyValue interface {
	Set(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
}

func kvOf(r Rendezvous) keyValue {
	switch v := r.(type) {
	case keyValue:
		return v
	case interface{ Client() *bootstrap.Client }:
		return v.Client()
	}
	return nil
}

// mismatchWait bounds how long a rank waits for the peer's description of
// its call after a mismatch.
const mismatchWait = 3 * time.Second

// peerReasonWait bounds how long a rank whose peer left looks for the
// peer's mismatch report.
const peerReasonWait = 500 * time.Millisecond

// explainMismatch completes a mismatch error with the peer's call: each
// rank that detects a mismatch publishes its own call in the bootstrap
// store and reads the peer's (the peer, receiving this rank's data, usually
// detects it too). If the peer's call cannot be learned in time, the error
// keeps the fingerprints.
func (c *Comm) explainMismatch(err error, desc string) error {
	var mm *collectives.MismatchError
	var pe *collectives.PeerError
	kv := kvOf(c.rdv)
	if kv == nil {
		return err
	}
	isMismatch, isPeer := errors.As(err, &mm), errors.As(err, &pe)
	if isPeer && !isMismatch {
		// The peer may have left because it found a mismatch: if it said
		// so, that is the cause.
		ctx, cancel := context.WithTimeout(context.Background(), peerReasonWait)
		defer cancel()
		// Say what this rank called too, for the peer's error.
		kv.Set(ctx, fmt.Sprintf("goccl/%s/mismatch/%d", c.id, c.rank), fmt.Appendf(nil, "%s #%d", desc, c.seq))
		if v, gerr := kv.Get(ctx, fmt.Sprintf("goccl/%s/mismatch/%d", c.id, pe.Peer)); gerr == nil {
			return fmt.Errorf("collective mismatch: rank %d called %s while rank %d called %s #%d (%w)",
				pe.Peer, v, c.rank, desc, c.seq, err)
		}
		return err
	}
	if !isMismatch {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), mismatchWait)
	defer cancel()
	self := fmt.Sprintf("%s #%d", desc, c.seq)
	if kv.Set(ctx, fmt.Sprintf("goccl/%s/mismatch/%d", c.id, c.rank), []byte(self)) != nil {
		return err
	}
	peer, gerr := kv.Get(ctx, fmt.Sprintf("goccl/%s/mismatch/%d", c.id, mm.Peer))
	if gerr != nil {
		return err
	}
	mm.PeerCall = string(peer)
	return err
}
