package main

import (
	"testing"
	"testing/fstest"
)

func TestRouteMemLimit(t *testing.T) {
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
		{name: "cgroup cap less a sixteenth", root: cgroup, want: 2147483648 - 2147483648/16},
		{name: "GOMEMLIMIT kept", root: cgroup, env: "100MiB", want: 0},
		{name: "no cgroup limit", root: fstest.MapFS{}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := routeMemLimit(tc.spec, tc.root, tc.env)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("routeMemLimit = %d, %v; want %d, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
