package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// maxLine is the longest line copied whole; longer ones are split.
const maxLine = 64 << 10

// timeFormat is the --timestamp format: UTC, milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z"

// output receives the ranks' lines and gorun's own messages and writes
// each whole, under one mutex, so that lines never interleave. A rank's
// line goes to gorun's stdout or stderr (the stream the rank wrote it on)
// tagged "[rank] ", or, with --output-dir, untagged to the rank's file.
type output struct {
	mu        sync.Mutex
	stdout    io.Writer
	stderr    io.Writer
	timestamp bool
	now       func() time.Time
	files     map[int]*os.File // with --output-dir: rank -> its file
}

func newOutput(stdout, stderr io.Writer, timestamp bool) *output {
	return &output{stdout: stdout, stderr: stderr, timestamp: timestamp, now: time.Now}
}

// rankFile is the --output-dir file of a rank.
func rankFile(dir string, rank int) string {
	return filepath.Join(dir, "rank-"+strconv.Itoa(rank)+".log")
}

// openFiles creates dir and one file per rank, truncating old ones.
func (o *output) openFiles(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--output-dir: %w", err)
	}
	o.files = make(map[int]*os.File, n)
	for r := range n {
		f, err := os.OpenFile(rankFile(dir, r), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			o.closeFiles()
			return fmt.Errorf("--output-dir: %w", err)
		}
		o.files[r] = f
	}
	return nil
}

func (o *output) closeFiles() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, f := range o.files {
		f.Close()
	}
	o.files = nil
}

// rankLine writes one line of a rank; text may lack its newline.
func (o *output) rankLine(rank int, toStderr bool, text []byte) {
	line := make([]byte, 0, len(text)+40)
	o.mu.Lock()
	defer o.mu.Unlock()
	f, toFile := o.files[rank]
	if !toFile {
		line = append(line, '[')
		line = strconv.AppendInt(line, int64(rank), 10)
		line = append(line, "] "...)
	}
	if o.timestamp {
		line = o.now().UTC().AppendFormat(line, timeFormat)
		line = append(line, ' ')
	}
	line = append(line, text...)
	if len(line) == 0 || line[len(line)-1] != '\n' {
		line = append(line, '\n')
	}
	switch {
	case toFile:
		_, _ = f.Write(line)
	case toStderr:
		_, _ = o.stderr.Write(line)
	default:
		_, _ = o.stdout.Write(line)
	}
}

// logf writes one of gorun's own messages to stderr, prefixed "gorun: ".
func (o *output) logf(format string, a ...any) {
	o.writeStderr([]byte("gorun: " + fmt.Sprintf(format, a...) + "\n"))
}

// writeStderr writes whole lines to gorun's stderr.
func (o *output) writeStderr(p []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = o.stderr.Write(p)
}

// logWriter is an io.Writer for the store's log on gorun's stderr; each
// Write must be whole lines.
type logWriter struct{ o *output }

func (l logWriter) Write(p []byte) (int, error) {
	l.o.writeStderr(p)
	return len(p), nil
}

// eachLine calls fn with every line of r (without splitting lines up to
// maxLine; a line without a final newline is passed as it is) until r
// ends.
func eachLine(r io.Reader, fn func(line []byte)) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			fn(chunk)
		}
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

// pump copies the lines of one rank's stream until it ends.
func (o *output) pump(rank int, r io.Reader, toStderr bool) {
	eachLine(r, func(line []byte) { o.rankLine(rank, toStderr, line) })
}

// pumpLabelled copies a stream of lines labelled "N: " by srun --label
// (N right-aligned, so possibly preceded by spaces) as rank N's lines, and
// passes every other line, srun's own, to other.
func (o *output) pumpLabelled(r io.Reader, toStderr bool, other func(line []byte)) {
	eachLine(r, func(line []byte) {
		if rank, text, ok := cutLabel(line); ok {
			o.rankLine(rank, toStderr, text)
			return
		}
		other(line)
	})
}

// cutLabel splits srun's "  12: text" into 12 and "text".
func cutLabel(line []byte) (rank int, text []byte, ok bool) {
	i := 0
	for i < len(line) && line[i] == ' ' {
		i++
	}
	j := i
	for j < len(line) && j-i < 7 && line[j] >= '0' && line[j] <= '9' {
		j++
	}
	if j == i || j >= len(line) || line[j] != ':' {
		return 0, nil, false
	}
	n, err := strconv.Atoi(string(line[i:j]))
	if err != nil {
		return 0, nil, false
	}
	text = line[j+1:]
	if len(text) > 0 && text[0] == ' ' {
		text = text[1:]
	}
	return n, text, true
}
