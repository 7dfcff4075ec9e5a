package bootstrap

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A flood of connections with the wrong secret (issue 11, item 15: 1,248
// lines, one per connection) logs the first warnBurst refusals in full and
// one line that counts the rest; good clients are served throughout.
func TestStoreRefusalFloodIsRateLimited(t *testing.T) {
	s, logs := newTestServer(t)
	const flood = 200
	for i := range flood {
		_, err := Dial(testCtx(t, 5*time.Second), s.Addr(), []byte("not the secret"))
		if !errors.Is(err, ErrAuth) {
			t.Fatalf("dial %d with the wrong secret: %v", i, err)
		}
	}
	c := dialTest(t, s.Addr())
	if err := c.Set(testCtx(t, 5*time.Second), "k", nil); err != nil {
		t.Fatalf("good client during the flood: %v", err)
	}
	c.Close()
	waitFor(t, 5*time.Second, "the first refusals in the log", func() bool {
		return strings.Count(logs.String(), "refused connection: wrong secret") == warnBurst
	})
	s.Close() // reports what the limiter counted
	out := logs.String()
	if n := strings.Count(out, "refused connection: wrong secret"); n != warnBurst {
		t.Errorf("%d refusals logged in full, want %d:\n%s", n, warnBurst, out)
	}
	want := fmt.Sprintf(`bootstrap: store: %d more refused connections \(wrong secret\) from 127\.0\.0\.1 in the last \d+s`, flood-warnBurst)
	if !regexp.MustCompile(want).MatchString(out) {
		t.Errorf("no summary line matching %q:\n%s", want, out)
	}
	if lines := strings.Count(out, "\n"); lines != warnBurst+1 {
		t.Errorf("%d log lines for %d refused connections, want %d:\n%s", lines, flood, warnBurst+1, out)
	}
}

func TestHostOf(t *testing.T) {
	for _, c := range []struct{ addr, want string }{
		{"10.0.0.7:41234", "10.0.0.7"},
		{"[fe80::1]:5", "fe80::1"},
		{"pipe", "pipe"},
	} {
		if got := hostOf(fakeAddr(c.addr)); got != c.want {
			t.Errorf("hostOf(%q) = %q, want %q", c.addr, got, c.want)
		}
	}
	if got := hostOf(nil); got != "unknown" {
		t.Errorf("hostOf(nil) = %q", got)
	}
}

type fakeAddr string

func (a fakeAddr) Network() string { return "tcp" }
func (a fakeAddr) String() string  { return string(a) }
