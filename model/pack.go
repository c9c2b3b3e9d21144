package model

import (
	"fmt"
	"runtime"
	"sync"

	"ubatch/internal/mem"
	"ubatch/quant"
	"ubatch/runner"
)

// pack rearranges every Q4_0, Q8_0, Q4_K and Q6_K matrix of the graph into 8-row panels
// (quant.PackRows) where the CPU has panel kernels, which multiply them 1.5-2.5 times as fast as
// the single-row kernels read the file layout. The panels live in one buffer outside the Go heap,
// as large as the originals; each original is released from memory once packed, so the model
// still occupies about the file's size. A token embedding tied to the output projection is packed
// too: the runner reads its rows from the panels (quant.DequantizePackedRow), so there is no
// second copy. Each matrix is packed by all cores; progress (may be nil) is called with the bytes
// packed so far and the total after each.
func (m *Model) pack(progress func(done, total int64)) error {
	var ws []*runner.Weight
	seen := map[*runner.Weight]bool{} // a mixture-of-experts model has tens of thousands
	total := 0
	for _, w := range m.Graph.Matrices() {
		if quant.CanPack(w.Type, w.Cols, w.Rows) && !seen[w] {
			seen[w] = true
			ws = append(ws, w)
			total += len(w.Data)
		}
	}
	if total == 0 {
		return nil
	}
	buf, err := mem.Alloc(total)
	if err != nil {
		return fmt.Errorf("allocating %d MiB for packed weights: %w", total>>20, err)
	}
	m.packed = buf
	done := 0
	for _, w := range ws {
		dst := buf[:len(w.Data):len(w.Data)]
		buf = buf[len(w.Data):]
		if err := packParallel(w, dst); err != nil {
			return fmt.Errorf("tensor %q: %w", w.Name, err)
		}
		mem.Release(w.Data)
		w.SetPacked(dst)
		done += len(dst)
		if progress != nil {
			progress(int64(done), int64(total))
		}
	}
	return nil
}

// packParallel packs w into dst, its panels split among the cores (panels are independent).
func packParallel(w *runner.Weight, dst []byte) error {
	panel := quant.PanelRows * w.RowBytes()
	panels := len(w.Data) / panel
	parts := min(runtime.GOMAXPROCS(0), panels)
	if parts <= 1 {
		return quant.PackRows(w.Type, w.Cols, dst, w.Data)
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := panels*i/parts*panel, panels*(i+1)/parts*panel
		wg.Go(func() { errs[i] = quant.PackRows(w.Type, w.Cols, dst[lo:hi], w.Data[lo:hi]) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (m *Model) freePacked() error {
	buf := m.packed
	m.packed = nil
	return mem.Free(buf)
}
