package grammar

import "testing"

func TestQuick(t *testing.T) {
	g, err := Parse(`root ::= "a" [b-d]+ ("x" | "yz")? [^a-z]{2}` + "\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"abx12", "abbbbyzéé", "ab€9", "a", "abq12", "ab12"} {
		m := NewMatcher(g, nil)
		err := m.AcceptBytes([]byte(s))
		t.Logf("%q: err=%v complete=%v", s, err, err == nil && m.Complete())
	}
}
