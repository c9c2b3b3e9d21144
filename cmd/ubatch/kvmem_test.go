package main

import (
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"ubatch/internal/testdata"
	"ubatch/quant"
)

func TestCheckKVPool(t *testing.T) {
	// stories260K: 5 layers, KV width 32; F16 cells take 2*5*32*2 + 8 = 648 bytes.
	const L, W, bs = 5, 32, 16
	tests := []struct {
		name    string
		cells   int
		dt      quant.Type
		avail   int64
		source  string
		wantErr []string
	}{
		{name: "fits", cells: 4096, dt: quant.F16, avail: 4096 * 648},
		{name: "fits after rounding to a block", cells: 4090, dt: quant.F16, avail: 4096 * 648},
		{name: "unknown memory", cells: 1 << 20, dt: quant.F32, avail: -1},
		{name: "one block short", cells: 4097, dt: quant.F16, avail: 4096 * 648, source: "MemAvailable in /proc/meminfo",
			wantErr: []string{"-c 4097: the KV cache would take 2.54 MiB", "only 2.53 MiB is available (MemAvailable in /proc/meminfo; --mem-limit overrides it)", "the largest -c that fits is 4096"}},
		{name: "F32 takes twice the room", cells: 4096, dt: quant.F32, avail: 4096 * 648, source: "--mem-limit",
			wantErr: []string{"--mem-limit allows 2.53 MiB", "the largest -c that fits is 2048"}},
		{name: "the issue's 10M", cells: 10_000_000, dt: quant.F16, avail: 1 << 30, source: "x",
			wantErr: []string{"would take 6.03 GiB", "the largest -c that fits is 1657008"}},
		{name: "overflow", cells: math.MaxInt, dt: quant.F16, avail: -1,
			wantErr: []string{"cannot be that large", "int32 cell index", "the largest -c that fits is 2147483632"}},
		{name: "overflow with memory known", cells: math.MaxInt - 3, dt: quant.F16, avail: 1 << 30,
			wantErr: []string{"cannot be that large", "the largest -c that fits is 1657008"}},
		{name: "not one block", cells: 16, dt: quant.F16, avail: 1000, source: "x",
			wantErr: []string{"not even one KV block of 16 tokens fits"}},
		// Q8_0: 2*5*34 + 8 = 348 bytes a cell, 54% of F16.
		{name: "Q8_0 fits twice F16's", cells: 7616, dt: quant.Q8_0, avail: 4096 * 648},
		{name: "Q8_0 one block short", cells: 7617, dt: quant.Q8_0, avail: 4096 * 648, source: "--mem-limit",
			wantErr: []string{"348 bytes a token: 5 layers × K and V × a 34-byte row (KV width 32 as Q8_0)", "the largest -c that fits is 7616"}},
		{name: "zero", cells: 0, dt: quant.F16, avail: -1, wantErr: []string{"must be positive"}},
		{name: "negative", cells: -5, dt: quant.F16, avail: -1, wantErr: []string{"must be positive"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			what := "-c " + strconv.Itoa(tc.cells)
			err := checkKVPool(L, W, tc.cells, bs, tc.dt, tc.avail, tc.source, what)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestLargestFitFits checks the advertised largest -c against the check itself: it passes, one
// block more does not.
func TestLargestFitFits(t *testing.T) {
	for _, avail := range []int64{648 * 16, 1 << 20, 1<<30 + 12345, 7 << 30} {
		err := checkKVPool(5, 32, math.MaxInt32, 16, quant.F16, avail, "x", "-c")
		_, after, _ := strings.Cut(err.Error(), "the largest -c that fits is ")
		n := atoi(t, after)
		if err := checkKVPool(5, 32, n, 16, quant.F16, avail, "x", "-c"); err != nil {
			t.Errorf("avail %d: the advertised largest -c %d is refused: %v", avail, n, err)
		}
		if err := checkKVPool(5, 32, n+1, 16, quant.F16, avail, "x", "-c"); err == nil {
			t.Errorf("avail %d: -c %d, past the advertised largest, is accepted", avail, n+1)
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		name, in string
		want     int64
		wantErr  bool
	}{
		{name: "bytes", in: "1048576", want: 1 << 20},
		{name: "K", in: "512K", want: 512 << 10},
		{name: "M lower case", in: "64m", want: 64 << 20},
		{name: "GiB", in: "8GiB", want: 8 << 30},
		{name: "GB", in: "2GB", want: 2 << 30},
		{name: "T", in: "1T", want: 1 << 40},
		{name: "space", in: " 3 G ", want: 3 << 30},
		{name: "negative", in: "-1G", wantErr: true},
		{name: "fraction", in: "1.5G", wantErr: true},
		{name: "overflow", in: "9000000000G", wantErr: true},
		{name: "unit only", in: "G", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "word", in: "lots", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseSize(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseSize(%q) = %d, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestAvailableMemory(t *testing.T) {
	const meminfo = "MemTotal:       32000000 kB\nMemFree:         1000000 kB\nMemAvailable:   24000000 kB\n"
	gib := int64(1 << 30)
	tests := []struct {
		name       string
		files      map[string]string
		want       int64
		wantSource string
		wantOK     bool
	}{
		{name: "meminfo only", files: map[string]string{"proc/meminfo": meminfo},
			want: 24000000 << 10, wantSource: "MemAvailable", wantOK: true},
		{name: "cgroup v2 limit below MemAvailable", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/app\n",
			"sys/fs/cgroup/app/memory.max": "4294967296\n", "sys/fs/cgroup/app/memory.current": "1073741824\n"},
			want: 3 * gib, wantSource: "cgroup", wantOK: true},
		{name: "cgroup v2 mounted at the root, no limit", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/\n",
			"sys/fs/cgroup/memory.max": "max\n", "sys/fs/cgroup/memory.current": "123\n"},
			want: 24000000 << 10, wantSource: "MemAvailable", wantOK: true},
		{name: "cgroup v2 namespaced: own directory at the root", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "0::/kubepods/pod1\n",
			"sys/fs/cgroup/memory.max": "2147483648", "sys/fs/cgroup/memory.current": "0"},
			want: 2 * gib, wantSource: "cgroup", wantOK: true},
		{name: "cgroup v1 limit", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "5:cpu:/\n4:memory:/job\n",
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "1073741824", "sys/fs/cgroup/memory/job/memory.usage_in_bytes": "2000000000"},
			want: 0, wantSource: "cgroup", wantOK: true},
		{name: "cgroup v1 without a limit", files: map[string]string{
			"proc/meminfo": meminfo, "proc/self/cgroup": "4:memory:/\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712", "sys/fs/cgroup/memory/memory.usage_in_bytes": "5"},
			want: 24000000 << 10, wantSource: "MemAvailable", wantOK: true},
		{name: "nothing readable", files: map[string]string{}, want: -1},
		{name: "meminfo without MemAvailable", files: map[string]string{"proc/meminfo": "MemTotal: 5 kB\n"}, want: -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range tc.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			got, source, ok := availableMemory(fsys)
			if got != tc.want || ok != tc.wantOK || !strings.Contains(source, tc.wantSource) {
				t.Fatalf("availableMemory = %d, %q, %v; want %d, %q, %v", got, source, ok, tc.want, tc.wantSource, tc.wantOK)
			}
		})
	}
}

// TestServeRefusesBadFlags runs `serve` with the KV sizes of the issue and bad HTTP limits: each
// must fail before anything is allocated or listened on, with a message that says what fits.
func TestServeRefusesBadFlags(t *testing.T) {
	model := testdata.Model(t, "stories260K.gguf")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "10M tokens in 1G", args: []string{"-c", "10000000", "--mem-limit", "1G"}, want: "the largest -c that fits is 1657008"},
		{name: "max int64", args: []string{"-c", "9223372036854775807"}, want: "cannot be that large"},
		{name: "negative", args: []string{"-c", "-5"}, want: "-c -5: the KV cache size must be positive"},
		{name: "default too large", args: []string{"-np", "16", "--mem-limit", "1M"}, want: "the default -c 32768 (room for 16 sequences)"},
		{name: "adaptive -np: the default for 16", args: []string{"--mem-limit", "1M"}, want: "the default -c 32768 (room for 16 sequences)"},
		{name: "default for -np 4", args: []string{"-np", "4", "--mem-limit", "1M"}, want: "the default -c 8192 (room for 4 sequences)"},
		{name: "F32 in 1M", args: []string{"-c", "1024", "--kv-type", "f32", "--mem-limit", "1M"}, want: "the largest -c that fits is 800"},
		{name: "Q8_0 with heads of 8", args: []string{"--kv-type", "q8_0"}, want: "a head dimension that is a multiple of 32, this model's is 8"},
		{name: "-ctk and -ctv differ", args: []string{"-ctk", "q8_0", "-ctv", "f16"}, want: "-ctk \"q8_0\" and -ctv \"f16\" differ"},
		{name: "unknown KV type", args: []string{"-ctk", "q4_0"}, want: "use f16, f32 or q8_0"},
		{name: "bad limit", args: []string{"--mem-limit", "lots"}, want: "--mem-limit: \"lots\" is not a size"},
		{name: "no connections", args: []string{"--max-connections", "0"}, want: "--max-connections 0: must be positive"},
		{name: "no read time", args: []string{"--read-timeout", "0s"}, want: "--read-timeout 0s: must be positive"},
		{name: "negative write time", args: []string{"--write-timeout", "-1s"}, want: "--write-timeout -1s: must be positive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "-m", model, "--port", "0"}, tc.args...)
			code, _, errs := ubatch(t, args...)
			if code == 0 || !strings.Contains(errs, tc.want) {
				t.Fatalf("exit %d, stderr does not say %q:\n%s", code, tc.want, errs)
			}
			if strings.Contains(errs, "listening") {
				t.Fatalf("the server started:\n%s", errs)
			}
		})
	}
}

func TestAvailableMemoryOfThisSystem(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/meminfo")
	}
	avail, source, ok := availableMemory(os.DirFS("/"))
	if !ok || avail <= 0 {
		t.Fatalf("availableMemory = %d, %q, %v on Linux", avail, source, ok)
	}
	t.Logf("%s available (%s)", fmtBytes(avail), source)
}
