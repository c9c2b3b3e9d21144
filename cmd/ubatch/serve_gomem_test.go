package main

import (
	"testing"
	"testing/fstest"
)

// TestGoMemLimit: the Go limit is the cgroup's cap less the models' memory and a sixteenth,
// and is left alone without a cap, under GOMEMLIMIT, or when too little would be left.
func TestGoMemLimit(t *testing.T) {
	const gib = int64(1 << 30)
	v2 := func(max string) map[string]string {
		return map[string]string{"proc/self/cgroup": "0::/app\n", "sys/fs/cgroup/app/memory.max": max, "sys/fs/cgroup/app/memory.current": "1000"}
	}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		outside int64
		env     string
		want    int64
		wantOK  bool
	}{
		{name: "4 GiB cap, 1 GiB of models", files: v2("4294967296"), outside: gib, want: 4*gib - gib - 4*gib/16, wantOK: true},
		{name: "v1 cap", files: map[string]string{"proc/self/cgroup": "4:memory:/job\n",
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "2147483648", "sys/fs/cgroup/memory/job/memory.usage_in_bytes": "5"},
			want: 2*gib - 2*gib/16, wantOK: true},
		{name: "no cap", files: v2("max"), outside: gib},
		{name: "no cgroup", files: map[string]string{}},
		{name: "GOMEMLIMIT is the operator's", files: v2("4294967296"), env: "3GiB"},
		{name: "the models leave too little", files: v2("4294967296"), outside: 4*gib - 300<<20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := fstest.MapFS{}
			for name, data := range tc.files {
				fsys[name] = &fstest.MapFile{Data: []byte(data)}
			}
			got, ok := goMemLimit(fsys, tc.outside, tc.env)
			if ok != tc.wantOK || ok && got != tc.want {
				t.Fatalf("goMemLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
