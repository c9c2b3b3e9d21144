package main

import (
	"testing"
	"testing/fstest"
)

func TestGoMemLimit(t *testing.T) {
	cgroup := fstest.MapFS{
		"proc/self/cgroup":                 {Data: []byte("0::/app\n")},
		"sys/fs/cgroup/app/memory.max":     {Data: []byte("2147483648\n")},
		"sys/fs/cgroup/app/memory.current": {Data: []byte("1073741824\n")},
	}
	tests := []struct {
		name    string
		spec    string
		root    fstest.MapFS
		env     string // GOMEMLIMIT
		want    int64
		wantErr bool
	}{
		{name: "flag", spec: "512M", root: cgroup, want: 512 << 20},
		{name: "flag over GOMEMLIMIT", spec: "1G", env: "100MiB", want: 1 << 30},
		{name: "bad flag", spec: "lots", wantErr: true},
		{name: "zero flag", spec: "0", wantErr: true},
		{name: "cgroup room", root: cgroup, want: (1 << 30) / 10 * 9},
		{name: "GOMEMLIMIT kept", root: cgroup, env: "100MiB", want: 0},
		{name: "no cgroup limit", root: fstest.MapFS{}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", tc.env)
			got, _, err := goMemLimit(tc.spec, tc.root)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("goMemLimit = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
