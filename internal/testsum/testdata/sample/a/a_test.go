package a

import "testing"

func TestPass(t *testing.T) {}
func TestFail(t *testing.T) { t.Log("some context"); t.Errorf("got 1, want 2") }
func TestSkipShared(t *testing.T) {
	t.Skipf("shared test data not found at /x/shared (set UBATCH_SHARED to its path)")
}
func TestSkipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("writes two ~60-100 MiB models")
	}
}
func TestSub(t *testing.T) {
	t.Run("one", func(t *testing.T) { t.Skip("nginx is not installed (Debian: apt-get install nginx)") })
	t.Run("two", func(t *testing.T) {})
}
