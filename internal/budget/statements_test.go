package budget

import (
	"os"
	"strings"
	"testing"
)

// Every file of sql/ is loaded in store.go: a statement written and never
// sent would be a rule the code does not follow.
func TestEveryStatementIsLoaded(t *testing.T) {
	src, err := os.ReadFile("store.go")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := sqlFiles.ReadDir("sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		if !strings.Contains(string(src), `load("`+name+`")`) {
			t.Errorf("sql/%s is not loaded in store.go", e.Name())
		}
	}
}
