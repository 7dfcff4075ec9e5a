package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/goccl/goccl/comm"
)

// TestTagsMatchExactly checks that point-to-point tags travel whole (issue
// 11 item 2: they travelled modulo 2^14, so Send(tag 1) was received by
// Recv(tag 16385) and both returned nil): tags across the whole range
// 0..MaxTag are delivered, different tags that agree modulo 2^14 or 2^16
// fail the receive naming both, and tags outside the range are refused at
// once.
func TestTagsMatchExactly(t *testing.T) {
	ctx := context.Background()
	runRanks(t, 2, testOpts, func(c *Comm) error {
		for _, tag := range []int{0, 1, 1 << 14, 1<<16 + 1, MaxTag} {
			buf := []int32{int32(tag), 7}
			var err error
			if c.Rank() == 0 {
				err = Send(ctx, c, buf, 1, tag)
			} else {
				buf[0] = -1
				err = Recv(ctx, c, buf, 0, tag)
				if err == nil && buf[0] != int32(tag) {
					err = fmt.Errorf("tag %d: received %v", tag, buf)
				}
			}
			if err != nil {
				return err
			}
		}
		for _, tag := range []int{-1, MaxTag + 1, 1 << 40} {
			b := []int32{1}
			for name, err := range map[string]error{
				"send":     Send(ctx, c, b, 1-c.Rank(), tag),
				"recv":     Recv(ctx, c, b, 1-c.Rank(), tag),
				"sendrecv": SendRecv(ctx, c, b, 1-c.Rank(), []int32{0}, 1-c.Rank(), tag),
			} {
				if err == nil || !strings.Contains(err.Error(), fmt.Sprint(tag)) || !strings.Contains(err.Error(), name+"(") {
					return fmt.Errorf("%s with tag %d: %v, want an error naming the call and tag", name, tag, err)
				}
			}
		}
		return nil
	})
	for _, tags := range [][2]int{{1, 1<<14 + 1}, {1, 1<<16 + 1}, {5, 1<<29 + 5}} {
		var recvErr error
		runRanks(t, 2, testOpts, func(c *Comm) error {
			buf := []float32{1, 2}
			if c.Rank() == 0 {
				err := Send(ctx, c, buf, 1, tags[0])
				if err != nil && !errors.Is(err, ErrClosed) && !strings.Contains(err.Error(), "rank 1") {
					return err
				}
				return nil
			}
			recvErr = Recv(ctx, c, buf, 0, tags[1])
			return nil
		})
		if recvErr == nil || !strings.Contains(recvErr.Error(), fmt.Sprint(tags[0])) || !strings.Contains(recvErr.Error(), fmt.Sprint(tags[1])) {
			t.Errorf("Send(tag %d) received by Recv(tag %d): %v, want an error naming both tags", tags[0], tags[1], recvErr)
		} else {
			t.Log(recvErr)
		}
	}
}
