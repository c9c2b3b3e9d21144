package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"math"
	"path"
	"strconv"
	"strings"

	"ubatch/kvcache"
	"ubatch/kvformat"
	"ubatch/quant"
	"ubatch/runner"
)

// checkKVPool refuses a KV cache of cells cells (rounded up to whole blocks of blockSize) that
// overflows or takes more than avail bytes, with an error that gives the largest -c that fits.
// avail < 0 means unknown: only the size limits of the cache itself apply. what names the size
// in the error ("-c 4096", "the default -c 4096 ...").
func checkKVPool(nLayers, kvDim, cells, blockSize int, dt quant.Type, avail int64, source, what string) error {
	if cells <= 0 {
		return fmt.Errorf("%s: the KV cache size must be positive", what)
	}
	perCell, err := kvcache.CellBytes(nLayers, kvDim, dt)
	if err != nil {
		return err
	}
	largest := int64(math.MaxInt32)
	if avail >= 0 {
		largest = min(largest, avail/perCell)
	}
	largest -= largest % int64(blockSize)
	row := kvformat.RowBytes(dt, kvDim)
	layout := fmt.Sprintf("%d bytes a token: %d layers × K and V × a %d-byte row (KV width %d as %v), + %d of bookkeeping",
		perCell, nLayers, row, kvDim, dt, perCell-2*int64(nLayers)*row)
	fits := fmt.Sprintf("the largest -c that fits is %d", largest)
	if largest == 0 {
		fits = fmt.Sprintf("not even one KV block of %d tokens fits: free memory, use a smaller --kv-type (f16, q8_0) or a smaller model", blockSize)
	}
	need, err := kvcache.PoolBytes(nLayers, kvDim, roundUp(cells, blockSize), dt)
	switch {
	case err != nil:
		return fmt.Errorf("%s: the KV cache cannot be that large (%v): %s", what, err, fits)
	case avail >= 0 && need > avail:
		have := fmt.Sprintf("only %s is available (%s; --mem-limit overrides it)", fmtBytes(avail), source)
		if source == "--mem-limit" {
			have = fmt.Sprintf("--mem-limit allows %s", fmtBytes(avail))
		}
		return fmt.Errorf("%s: the KV cache would take %s (%s), but %s: %s", what, fmtBytes(need), layout, have, fits)
	}
	return nil
}

// roundUp rounds n up to a multiple of b, saturating instead of overflowing (PoolBytes then
// refuses the size).
func roundUp(n, b int) int {
	if r := n % b; r != 0 {
		if n > math.MaxInt-(b-r) {
			return math.MaxInt
		}
		n += b - r
	}
	return n
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d bytes", n)
}

// parseSize parses a byte count with an optional binary suffix: 123, 512K, 64M, 8G, 1T (KiB,
// MiB, GiB and TiB and a trailing B are accepted too).
func parseSize(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "I")
	shift := 0
	if t != "" {
		if i := strings.IndexByte("KMGT", t[len(t)-1]); i >= 0 {
			shift = 10 * (i + 1)
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(t), 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is not a size: use bytes or a number with K, M, G or T (e.g. 8G)", s)
	}
	return n << shift, nil
}

// availableMemory returns the memory the process may still take, read from the system under
// root: MemAvailable of proc/meminfo, lowered to the room left under the process's cgroup limit
// (v2 memory.max or v1 memory.limit_in_bytes, less current usage) when that is smaller. ok is false
// when neither can be read (not Linux).
func availableMemory(root fs.FS) (avail int64, source string, ok bool) {
	avail, source = -1, ""
	if b, err := fs.ReadFile(root, "proc/meminfo"); err == nil {
		if n, found := memInfoField(b, "MemAvailable"); found {
			avail, source = n, "MemAvailable in /proc/meminfo"
		}
	}
	if room, found := cgroupRoom(root); found && (avail < 0 || room < avail) {
		avail, source = room, "the cgroup's memory limit less its usage"
	}
	return avail, source, avail >= 0
}

// memInfoField returns a "Key:   123 kB" line of /proc/meminfo in bytes.
func memInfoField(meminfo []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(meminfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || n < 0 || n > math.MaxInt64>>10 {
			return 0, false
		}
		if len(f) > 1 && f[1] == "kB" {
			n <<= 10
		}
		return n, true
	}
	return 0, false
}

// cgroupRoom returns the bytes left under the memory limit of the process's cgroup, as named in
// proc/self/cgroup; false when there is no limit or it cannot be read.
func cgroupRoom(root fs.FS) (int64, bool) {
	limit, usage, ok := cgroupMemory(root)
	return max(0, limit-usage), ok
}

// cgroupMemory returns the memory limit of the process's cgroup and its usage; false when there
// is no limit or they cannot be read.
func cgroupMemory(root fs.FS) (limit, usage int64, ok bool) {
	b, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return 0, 0, false
	}
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, limitFile, usageFile string
		switch {
		case parts[0] == "0" && parts[1] == "": // cgroup v2
			dir, limitFile, usageFile = "sys/fs/cgroup", "memory.max", "memory.current"
		case strings.Contains(","+parts[1]+",", ",memory,"): // cgroup v1
			dir, limitFile, usageFile = "sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes"
		default:
			continue
		}
		// Inside a container the cgroup's own directory is often mounted as the root.
		for _, d := range []string{path.Join(dir, parts[2]), dir} {
			limit, ok1 := readCount(root, path.Join(d, limitFile))
			usage, ok2 := readCount(root, path.Join(d, usageFile))
			if ok1 && ok2 {
				if limit >= 1<<62 { // "max", or v1's page-rounded MaxInt64: no limit
					return 0, 0, false
				}
				return limit, usage, true
			}
		}
	}
	return 0, 0, false
}

// readCount reads a file holding one decimal count, or "max" (returned as MaxInt64).
func readCount(root fs.FS, name string) (int64, bool) {
	b, err := fs.ReadFile(root, name)
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return math.MaxInt64, true
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}

// kvLayers and kvWidest size a model's KV cache for the memory checks: its layers with a KV
// cache of their own, each as wide as the widest (Gemma 4's full and sliding layers differ; an
// upper bound then).
func kvLayers(h *runner.Hparams) int { return h.NKVLayers() }

func kvWidest(h *runner.Hparams) int {
	_, _, kvd, _ := h.MaxShape()
	return kvd
}
