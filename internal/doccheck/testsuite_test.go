package doccheck

import (
	"regexp"
	"strings"
	"testing"
)

// stepRE finds scripts/test.sh's step titles: step "title".
var stepRE = regexp.MustCompile(`(?m)^\s*step "([^"]+)"`)

// pkgRE finds the packages the test scripts install: pkgs=(...),
// pkgs+=(...) and install_pkgs a b c.
var pkgRE = regexp.MustCompile(`(?m)^\s*(?:pkgs\+?=\(([^)]*)\)|install_pkgs ([a-z0-9 .+-]+?)\s*(?:\|\||$))`)

// The README names every step of scripts/test.sh, in bold, with the
// script's own title, and every Debian package the suite installs (issue
// 11, item 17: the README's description was out of date and did not say
// that the suite installs packages).
func TestReadmeDescribesTheTestSuite(t *testing.T) {
	readme := read(t, "README.md")
	script := read(t, "scripts/test.sh")
	steps := stepRE.FindAllStringSubmatch(script, -1)
	if len(steps) < 5 {
		t.Fatalf("found %d steps in scripts/test.sh", len(steps))
	}
	for _, m := range steps {
		title := strings.TrimSpace(strings.Split(m[1], "$")[0]) // "fuzz targets, ${FUZZTIME} each"
		title = strings.TrimSuffix(title, ",")
		if title == "all tests passed" {
			continue
		}
		if !strings.Contains(readme, "**"+title) {
			t.Errorf("README.md does not describe the test step %q (as **%s**)", m[1], title)
		}
	}
	var pkgs []string
	for _, f := range []string{"scripts/install-deps.sh", "scripts/gorun-integration-hosts.sh", "scripts/gorun-integration-slurm.sh"} {
		for _, m := range pkgRE.FindAllStringSubmatch(read(t, f), -1) {
			pkgs = append(pkgs, strings.Fields(m[1]+" "+m[2])...)
		}
	}
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages in the test scripts: %v", len(pkgs), pkgs)
	}
	for _, p := range pkgs {
		if !regexp.MustCompile(`(^|[\s(,` + "`" + `])` + regexp.QuoteMeta(p) + `($|[\s),.` + "`" + `])`).MatchString(readme) {
			t.Errorf("README.md does not say that the test suite installs %s", p)
		}
	}
}
