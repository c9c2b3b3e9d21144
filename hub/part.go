package hub

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A download writes dest's bytes into a part file beside it, named "." + base + ".DIGITS.part"
// (os.CreateTemp's random digits), and holds a lock on it while it runs (see lockPart), so a later
// download of the same file can tell the part files of dead downloads from those of live ones.

// partPrefix and partSuffix frame the part file names of dest.
func partPrefix(dest string) string { return "." + filepath.Base(dest) + "." }

const partSuffix = ".part"

// isPartOf reports whether name is a part file of dest: the prefix, only digits, the suffix. The
// digits matter: ".a.gguf.b.gguf.1.part" belongs to a.gguf.b.gguf, not to a.gguf.
func isPartOf(name, dest string) bool {
	mid, ok := strings.CutPrefix(name, partPrefix(dest))
	if !ok {
		return false
	}
	mid, ok = strings.CutSuffix(mid, partSuffix)
	return ok && mid != "" && strings.Trim(mid, "0123456789") == ""
}

// createPart creates and locks a new part file for dest. A concurrent cleaner may delete the file
// between its creation and the lock (it was not locked yet); the path is then checked to still
// name the locked file, and a new one is made if it does not.
func createPart(dest string) (*os.File, error) {
	for range 3 {
		f, err := os.CreateTemp(filepath.Dir(dest), partPrefix(dest)+"*"+partSuffix)
		if err != nil {
			return nil, fmt.Errorf("create temporary file: %w", err)
		}
		if err := lockPart(f); err != nil {
			f.Close()
			os.Remove(f.Name())
			return nil, fmt.Errorf("lock temporary file %s: %w", f.Name(), err)
		}
		held, err1 := f.Stat()
		named, err2 := os.Stat(f.Name())
		if err1 == nil && err2 == nil && os.SameFile(held, named) {
			return f, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("create temporary file beside %s: another process keeps removing it", dest)
}

// removeStaleParts deletes the part files of dest that no live download holds. Failures are only
// logged: a stale file costs disk space, not correctness.
func (o *resolved) removeStaleParts(dest string) {
	entries, err := os.ReadDir(filepath.Dir(dest))
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || !isPartOf(e.Name(), dest) {
			continue
		}
		p := filepath.Join(filepath.Dir(dest), e.Name())
		if partInUse(p, o.IdleTimeout) {
			o.Logger.Debug("another download is writing this part file; leaving it", "path", p)
			continue
		}
		if err := os.Remove(p); err != nil {
			o.Logger.Warn("cannot remove the part file of an interrupted download", "path", p, "err", err)
			continue
		}
		o.Logger.Info("removed the part file of an interrupted download", "path", p)
	}
}
