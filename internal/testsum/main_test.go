package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// ev is one recorded go test -json line.
func ev(action, pkg, test, output string) string {
	s := `{"Action":"` + action + `","Package":"` + pkg + `"`
	if test != "" {
		s += `,"Test":"` + test + `"`
	}
	if output != "" {
		s += `,"Output":` + quote(output)
	}
	return s + "}\n"
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// skipped is the events of a test that skipped with msg.
func skipped(pkg, test, msg string) string {
	return ev("run", pkg, test, "") + ev("output", pkg, test, "=== RUN   "+test+"\n") +
		ev("output", pkg, test, "    x_test.go:12: "+msg+"\n") + ev("output", pkg, test, "--- SKIP: "+test+" (0.00s)\n") +
		ev("skip", pkg, test, "")
}

func passed(pkg, test string) string {
	return ev("run", pkg, test, "") + ev("output", pkg, test, "=== RUN   "+test+"\n") +
		ev("output", pkg, test, "--- PASS: "+test+" (0.00s)\n") + ev("pass", pkg, test, "")
}

func TestSummary(t *testing.T) {
	mixed, err := os.ReadFile("testdata/mixed.json") // go test -json -short of a failing, a skipping and a broken package
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		in       string
		code     int
		want     []string // in this order
		notWant  []string
		lastLine string
	}{
		{
			name: "all pass",
			in:   ev("start", "p", "", "") + passed("p", "TestA") + passed("p", "TestB") + ev("output", "p", "", "PASS\n") + ev("output", "p", "", "ok  \tp\t0.01s\n") + ev("pass", "p", "", ""),
			want: []string{"ok  \tp\t0.01s\n", "== tests: 2 run in 1 packages (subtests counted): 2 passed, 0 failed, 0 skipped"},
			// a passing test's output and the lone PASS are not echoed, as go test without -v
			notWant:  []string{"--- PASS", "PASS\n"},
			lastLine: "2 passed, 0 failed, 0 skipped",
		},
		{
			name: "skips grouped by reason, biggest group first",
			in: skipped("p", "TestShared1", "shared test data not found at /x/shared (set UBATCH_SHARED to its path)") +
				skipped("p", "TestShared2", "shared test data not found at /x/shared (set UBATCH_SHARED to its path)") +
				skipped("q", "TestNginx", "nginx is not installed (Debian: apt-get install nginx); skipping") +
				skipped("q", "TestBrowser", "/usr/bin/chromium is missing: install the Debian package chromium to run the browser test") +
				skipped("q", "TestBig", "writes two ~60-100 MiB models") + passed("q", "TestOK"),
			want: []string{"1 passed, 0 failed, 5 skipped",
				"     2  the shared test data (models, llama.cpp's reference outputs) is missing\n        to run them: put it beside the checkout as ../shared",
				"e.g. p TestShared1, p TestShared2\n",
				"     1  Chromium is not installed", "to run them: apt-get install chromium\n",
				"     1  nginx is not installed\n        to run them: apt-get install nginx (Debian's package)",
				"     1  writes two ~60-100 MiB models\n        e.g. q TestBig"},
			notWant:  []string{"--- SKIP"},
			lastLine: "1 passed, 0 failed, 5 skipped",
		},
		{
			name: "a failure is printed in full",
			in: passed("p", "TestA") + ev("run", "p", "TestB", "") + ev("output", "p", "TestB", "=== RUN   TestB\n") +
				ev("output", "p", "TestB", "    b_test.go:3: got 1, want 2\n") + ev("output", "p", "TestB", "--- FAIL: TestB (0.00s)\n") +
				ev("fail", "p", "TestB", "") + ev("output", "p", "", "FAIL\tp\t0.01s\n") + ev("fail", "p", "", ""),
			code:     1,
			want:     []string{"=== RUN   TestB\n    b_test.go:3: got 1, want 2\n--- FAIL: TestB (0.00s)\n", "FAIL\tp\t0.01s\n", "FAIL p TestB\n"},
			lastLine: "1 passed, 1 failed, 0 skipped",
		},
		{
			name: "a panic outside any test fails the package",
			in: passed("p", "TestA") + ev("output", "p", "", "panic: test timed out after 10m0s\n") +
				ev("output", "p", "", "FAIL\tp\t600.0s\n") + ev("fail", "p", "", ""),
			code:     1,
			want:     []string{"panic: test timed out after 10m0s\n", "FAIL p (the package: a build error, panic or timeout, above)"},
			lastLine: "1 passed, 0 failed, 0 skipped",
		},
		{
			name: "recorded: build failure, failure, skips",
			in:   string(mixed),
			code: 1,
			want: []string{"b/b_test.go:5:33: undefined: undefined\n", "FAIL\tsample/b [build failed]\n",
				"    a_test.go:6: some context\n    a_test.go:6: got 1, want 2\n--- FAIL: TestFail",
				"== tests: 7 run in 2 packages (subtests counted): 3 passed, 1 failed, 3 skipped",
				"FAIL sample/a TestFail\n", "FAIL sample/b (the package",
				"1  nginx is not installed", "1  the shared test data", "1  writes two ~60-100 MiB models"},
			lastLine: "3 passed, 1 failed, 3 skipped",
		},
		{
			name:     "lines that are not JSON are echoed",
			in:       "go: downloading example.com/x v1.0.0\n" + passed("p", "TestA"),
			want:     []string{"go: downloading example.com/x v1.0.0\n"},
			lastLine: "1 passed, 0 failed, 0 skipped",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(nil, strings.NewReader(tc.in), &out, &errb)
			got := out.String()
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, errb.String())
			}
			at := 0
			for _, w := range tc.want {
				i := strings.Index(got[at:], w)
				if i < 0 {
					t.Errorf("output lacks %q after offset %d:\n%s", w, at, got)
					continue
				}
				at += i + len(w)
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("output has %q:\n%s", w, got)
				}
			}
			lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
			if last := lines[len(lines)-1]; last != tc.lastLine {
				t.Errorf("last line %q, want %q", last, tc.lastLine)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name, msg, title, fix string
	}{
		{"shared", "shared test data not found at ../shared (set UBATCH_SHARED to its path)", "the shared test data (models, llama.cpp's reference outputs) is missing", "put it beside the checkout as ../shared, or set UBATCH_SHARED to its path"},
		{"redis", "redis-server is not installed (Debian: apt-get install redis-server); skipping the Redis tests", "redis-server is not installed", "apt-get install redis-server (Debian's package)"},
		{"prometheus", "prometheus is not installed (Debian: apt-get install prometheus)", "prometheus is not installed", "apt-get install prometheus (Debian's package)"},
		{"cpu", "no AVX2", "this CPU lacks the instructions or kernel path they test", "a CPU that has them (amd64 with AVX-512 VNNI runs every path; arm64 runs the NEON ones)"},
		{"node", "npx not found: the openai Node client test needs Node.js and npm", "Node.js and npm are not installed (the official clients' tests)", "install Node.js and npm; the test installs the client packages it needs"},
		{"kube-apiserver", "UBATCH_KUBE_APISERVER is not set: no kube-apiserver to test discovery against (scripts/kube-apiserver.sh builds one and prints its path)",
			"kube-apiserver or etcd is missing (the router's Kubernetes discovery tests)", "apt-get install etcd-server, and export UBATCH_KUBE_APISERVER=$(scripts/kube-apiserver.sh) (it builds kube-apiserver once)"},
		{"etcd", "etcd is not installed (Debian: apt-get install etcd-server): no control plane to test discovery against",
			"kube-apiserver or etcd is missing (the router's Kubernetes discovery tests)", "apt-get install etcd-server, and export UBATCH_KUBE_APISERVER=$(scripts/kube-apiserver.sh) (it builds kube-apiserver once)"},
		{"host address", "no non-loopback IPv4 address on this host: the nodes need one, as EndpointSlices refuse loopback addresses",
			"the host has no non-loopback IPv4 address (EndpointSlices refuse loopback ones)", "a network interface with an IPv4 address besides lo"},
		{"own text", "starts two servers", "starts two servers", ""},
		{"none", "", "no reason given (t.SkipNow)", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if r := classify(tc.msg); r.title != tc.title || r.fix != tc.fix {
				t.Errorf("classify(%q) = %+v, want %q, %q", tc.msg, r, tc.title, tc.fix)
			}
		})
	}
}

// TestRunsGoTest: with arguments it runs go test -json itself and returns go test's exit
// status (here on the recorded sample module, which fails).
func TestRunsGoTest(t *testing.T) {
	if _, err := os.Stat("testdata/sample/go.mod"); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) })
	if err := os.Chdir("testdata/sample"); err != nil {
		t.Fatal(err)
	}
	code := run([]string{"-short", "./..."}, nil, &out, &errb)
	if code != 1 {
		t.Errorf("exit %d, want go test's 1:\n%s\n%s", code, out.String(), errb.String())
	}
	for _, w := range []string{"(-short was given", "3 passed, 1 failed, 3 skipped\n"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
}
