package mem_test

import (
	"testing"

	"github.com/goccl/goccl/transport"
	"github.com/goccl/goccl/transport/mem"
	"github.com/goccl/goccl/transport/transporttest"
)

func TestConformance(t *testing.T) {
	net := mem.NewNetwork(mem.Options{})
	transporttest.Run(t, func(t testing.TB) transport.Device { return net.NewDevice() })
}
