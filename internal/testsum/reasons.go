package main

import (
	"regexp"
	"strings"
)

// reason is why tests skipped, as the summary groups them, and what makes them run.
type reason struct {
	title, fix string
}

// reasonRule maps the skip messages that match re to a reason; $1 in title and fix is re's
// first group.
type reasonRule struct {
	re         *regexp.Regexp
	title, fix string
}

// reasonRules are the skip messages of the repository's tests, by what they lack, the first
// match wins. A message no rule matches is a reason of its own (its text).
var reasonRules = []reasonRule{
	{regexp.MustCompile(`shared test data not found|UBATCH_SHARED|shared/(models|reference|templates)|no reference outputs|no vocab files`),
		"the shared test data (models, llama.cpp's reference outputs) is missing",
		"put it beside the checkout as ../shared, or set UBATCH_SHARED to its path"},
	{regexp.MustCompile(`(?i)chromium`), "Chromium is not installed (the web page's browser test)",
		"apt-get install chromium"},
	{regexp.MustCompile(`\b(redis-server|nginx|prometheus|promtool|curl) is not installed`), "$1 is not installed",
		"apt-get install $1 (Debian's package)"},
	{regexp.MustCompile(`(redis-server|nginx|prometheus) not found`), "$1 is not installed",
		"apt-get install $1 (Debian's package)"},
	{regexp.MustCompile(`Node\.js|\bnpm\b`), "Node.js and npm are not installed (the official clients' tests)",
		"install Node.js and npm; the test installs the client packages it needs"},
	{regexp.MustCompile(`LLAMA_CPP_BIN`), "llama.cpp's tools are not found",
		"set LLAMA_CPP_BIN to the bin folder of a llama.cpp build"},
	{regexp.MustCompile(`UBATCH_KUBE_APISERVER|etcd is not installed`),
		"kube-apiserver or etcd is missing (the router's Kubernetes discovery tests)",
		"apt-get install etcd-server, and export UBATCH_KUBE_APISERVER=$(scripts/kube-apiserver.sh) (it builds kube-apiserver once)"},
	{regexp.MustCompile(`non-loopback IPv4`), "the host has no non-loopback IPv4 address (EndpointSlices refuse loopback ones)",
		"a network interface with an IPv4 address besides lo"},
	{regexp.MustCompile(`-trimpath`), "built with -trimpath", "run the tests without -trimpath"},
	{regexp.MustCompile(`(?i)\bCPU\b|AVX|F16C|VNNI|FMA|assembly|kernel path|Go twin|this architecture`),
		"this CPU lacks the instructions or kernel path they test",
		"a CPU that has them (amd64 with AVX-512 VNNI runs every path; arm64 runs the NEON ones)"},
	{regexp.MustCompile(`/proc|loopback`), "the system lacks what they read (/proc, 127/8 on the loopback)",
		"Linux with the whole 127.0.0.0/8 on lo"},
}

// classify is the reason of a skip message.
func classify(msg string) reason {
	for _, r := range reasonRules {
		if m := r.re.FindStringSubmatch(msg); m != nil {
			g := ""
			if len(m) > 1 {
				g = m[1]
			}
			return reason{strings.ReplaceAll(r.title, "$1", g), strings.ReplaceAll(r.fix, "$1", g)}
		}
	}
	if msg == "" {
		return reason{title: "no reason given (t.SkipNow)"}
	}
	return reason{title: msg}
}
