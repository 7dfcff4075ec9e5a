package main

import (
	"bufio"
	"io"
	"strconv"
	"sync"
)

// maxLine is the longest line copied whole; longer ones are split.
const maxLine = 64 << 10

// lineWriter writes whole lines to one of two destinations under one mutex,
// so lines from different ranks and streams never interleave.
type lineWriter struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
}

func (w *lineWriter) writeLine(dst io.Writer, line []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = dst.Write(line)
}

// logWriter is an io.Writer for gorun's own messages on stderr; each Write
// must be whole lines.
type logWriter struct{ w *lineWriter }

func (l logWriter) Write(p []byte) (int, error) {
	l.w.writeLine(l.w.stderr, p)
	return len(p), nil
}

// pump copies r to dst line by line, each line prefixed with "[rank] ",
// until r ends.
func (w *lineWriter) pump(rank int, r io.Reader, dst io.Writer) {
	prefix := "[" + strconv.Itoa(rank) + "] "
	br := bufio.NewReaderSize(r, maxLine)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			line := make([]byte, 0, len(prefix)+len(chunk)+1)
			line = append(append(line, prefix...), chunk...)
			if line[len(line)-1] != '\n' {
				line = append(line, '\n')
			}
			w.writeLine(dst, line)
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}
