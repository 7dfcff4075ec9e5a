package comm_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEQuotesExample checks that the program in README.md's "Using
// goccl" is the compiled and tested code of example_test.go: main is
// ExampleInit's body and train is train, verbatim (issue 11 item 19: the
// README's snippet did not compile as pasted).
func TestREADMEQuotesExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	funcText := func(name string) string {
		s := string(src)
		i := strings.Index(s, "\nfunc "+name+"(")
		if i < 0 {
			t.Fatalf("example_test.go has no func %s", name)
		}
		s = s[i+1:]
		return s[:strings.Index(s, "\n}\n")+3]
	}
	body := funcText("ExampleInit")
	body = body[strings.Index(body, "{\n")+2 : len(body)-2]
	want := "```go\npackage main\n\nimport (\n\t\"context\"\n\t\"fmt\"\n\t\"log\"\n\n\t\"github.com/goccl/goccl/comm\"\n)\n\n" +
		"func main() {\n" + body + "}\n\n// train is what every rank runs.\n" + funcText("train") + "```\n"
	if !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not quote example_test.go; its \"Using goccl\" program should read:\n%s", want)
	}
}
