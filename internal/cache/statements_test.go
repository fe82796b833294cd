package cache

import (
	"os"
	"strings"
	"testing"
)

// Every file of sql/ is loaded in pg.go.
func TestEveryStatementIsLoaded(t *testing.T) {
	src, err := os.ReadFile("pg.go")
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := sqlFiles.ReadDir("sql")
	for _, e := range entries {
		if name := strings.TrimSuffix(e.Name(), ".sql"); !strings.Contains(string(src), `load("`+name+`")`) {
			t.Errorf("sql/%s is not loaded in pg.go", e.Name())
		}
	}
}
