package idemd_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocExamples runs the examples of docs/clients/go.md and
// clients/go/README.md (they live in example_*_test.go) against idemd.
func TestDocExamples(t *testing.T) {
	c := liveClient(t)
	op := newOp(t, c)
	srv := httptest.NewServer(checkoutMux(c, op))
	defer srv.Close()
	key := uniq("cart")
	var bodies []string
	for i := 0; i < 2; i++ {
		req, _ := http.NewRequest("POST", srv.URL+"/orders", strings.NewReader(`{"sku":"A-1"}`))
		req.Header.Set("Idempotency-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 || resp.Header.Get("Idempotent-Replayed") != []string{"false", "true"}[i] {
			t.Fatalf("submit %d: %d %v %s", i, resp.StatusCode, resp.Header, b)
		}
		bodies = append(bodies, string(b))
	}
	if bodies[0] != bodies[1] {
		t.Fatalf("the duplicate got another answer: %q %q", bodies[0], bodies[1])
	}
	batch := []Email{{ID: uniq("evt"), To: "a@example.com"}, {ID: uniq("evt"), To: "b@example.com"}}
	for i := 0; i < 2; i++ {
		ack, err := sendBatch(context.Background(), c, op, batch)
		if err != nil || len(ack) != 2 {
			t.Fatalf("sendBatch: %v %v", ack, err)
		}
	}
	pay := uniq("pay")
	for i := 0; i < 2; i++ {
		if err := capture(context.Background(), c, op, pay); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDocBlocksMatchFiles checks that every fenced go block of
// docs/clients/go.md and clients/go/README.md preceded by <!-- file: PATH --> is byte for byte the
// file PATH (relative to the repository root), so the doc shows code that
// this test suite compiles and runs.
func TestDocBlocksMatchFiles(t *testing.T) {
	for _, page := range []string{"docs/clients/go.md", "clients/go/README.md"} {
		t.Run(page, func(t *testing.T) { checkDocBlocks(t, page) })
	}
}

func checkDocBlocks(t *testing.T, page string) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- file: ([^ ]+) -->\n```[a-z]*\n(.*?)```\n")
	blocks := re.FindAllStringSubmatch(string(doc), -1)
	if len(blocks) == 0 {
		t.Fatalf("no <!-- file: --> blocks in %s", page)
	}
	fences := strings.Count(string(doc), "\n```go\n")
	if fences != len(blocks) {
		t.Fatalf("%d go blocks but %d name their file", fences, len(blocks))
	}
	for _, b := range blocks {
		want, err := os.ReadFile(filepath.Join(root, b[1]))
		if err != nil {
			t.Fatalf("%s: %v", b[1], err)
		}
		if string(want) != b[2] {
			t.Errorf("the block of %s in %s differs from the file", b[1], page)
		}
	}
}

// installLines returns the line of README.md and of docs/clients/go.md
// that starts with prefix (an install command), failing unless both pages
// show the same one.
func installLines(t *testing.T, prefix string) string {
	t.Helper()
	var found []string
	for _, page := range []string{"README.md", filepath.Join("..", "..", "docs", "clients", "go.md")} {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		line := ""
		for _, l := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(l, prefix) {
				line = l
				break
			}
		}
		if line == "" {
			t.Fatalf("%s: no line starting with %q", page, prefix)
		}
		found = append(found, line)
	}
	if found[0] != found[1] {
		t.Fatalf("the pages differ:\n%s\n%s", found[0], found[1])
	}
	return found[0]
}

// installAndRun runs the install line of the pages in a fresh module (the
// checkout's path instead of ../idemd, commands joined with &&, each a go
// command), then builds and runs a program importing the client, with no
// module proxy.
func installAndRun(t *testing.T, line string, env ...string) {
	t.Helper()
	dir := t.TempDir()
	src, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	main := "package main\n\nimport (\n\t\"fmt\"\n\n\t\"idemd.dev/go/idemd\"\n)\n\nfunc main() { fmt.Println(idemd.ETag(7)) }\n"
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	cmds := [][]string{{"mod", "init", "example.com/shop"}}
	for _, c := range strings.Split(strings.ReplaceAll(line, "../idemd/clients/go", src), " && ") {
		f := strings.Fields(c)
		if len(f) < 2 || f[0] != "go" {
			t.Fatalf("not a go command: %q", c)
		}
		cmds = append(cmds, f[1:])
	}
	cmds = append(cmds, []string{"run", "."})
	for _, args := range cmds {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append([]string{"GOPROXY=off"}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
		if args[0] == "run" && strings.TrimSpace(string(out)) != `"7"` {
			t.Fatalf("go run: %s", out)
		}
	}
}

// TestInstallWithReplace runs the install line of the README and of
// docs/clients/go.md (a replace directive and go get).
func TestInstallWithReplace(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	installAndRun(t, installLines(t, "go mod edit -replace="), "GOFLAGS=-mod=mod", "GOWORK=off")
}

// TestInstallWithWorkspace runs the pages' other way, a go.work that uses
// the checkout's module (workspace mode refuses -mod=mod: GOFLAGS empty).
func TestInstallWithWorkspace(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	installAndRun(t, installLines(t, "go work init "), "GOFLAGS=", "GOWORK=")
}
