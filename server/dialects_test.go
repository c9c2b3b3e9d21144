package server

// testDialects are the dialects the core's test servers serve beside the core's routes (their
// Config.Dialects): every dialect package, set by dialects_ext_test.go, whose package
// (server_test) may import them where this one may not.
var testDialects []Dialect

// SetTestDialects sets testDialects; dialects_ext_test.go's init calls it.
func SetTestDialects(d ...Dialect) { testDialects = d }

// llamaCompletion is what the core's tests read of llama.cpp's /completion answer
// (server/llamacpp's type).
type llamaCompletion struct {
	Content  string `json:"content"`
	Stop     bool   `json:"stop"`
	StopType string `json:"stop_type"`
}
