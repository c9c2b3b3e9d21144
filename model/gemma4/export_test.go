package gemma4

// SharedFrom makes the layers that share KV read the first layer of their kind instead of the
// last before them (llama.cpp's choice): TestFeaturesMatter's check that the source matters.
func SharedFrom(m *Model) {
	for i := range m.Layers {
		l := &m.Layers[i]
		if !l.dims.Shared {
			continue
		}
		for j := range m.Layers {
			if d := m.Layers[j].dims; !d.Shared && d.Sliding == l.dims.Sliding {
				l.dims.KV = j
				break
			}
		}
	}
}
