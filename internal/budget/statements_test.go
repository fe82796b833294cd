package budget

import (
	"os"
	"testing"

	"github.com/hfsent/hfsent/internal/sqlfile"
)

// Every file of sql/ is loaded in store.go: a statement written and never
// sent would be a rule the code does not follow.
func TestEveryStatementIsLoaded(t *testing.T) {
	src, err := os.ReadFile("store.go")
	if err != nil {
		t.Fatal(err)
	}
	missing, err := sqlfile.Unloaded(sqlFiles, string(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range missing {
		t.Errorf("sql/%s is not loaded in store.go", name)
	}
}
