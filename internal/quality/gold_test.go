package quality

import (
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/input"
)

var goldOpts = input.Options{Name: "gold.csv", IDColumn: "request_id", GoldColumn: "gold"}

func TestReadGold(t *testing.T) {
	g, err := ReadGold(strings.NewReader("request_id;gold;text\n a ;pos;x\nb;;y\na;POS;z\n"), goldOpts)
	if err != nil {
		t.Fatal(err)
	}
	if l, ok := g.Label("a"); !ok || Key(l) != "pos" || g.Rows != 3 || g.Blank != 1 {
		t.Errorf("a: %q %v, rows %d blank %d", l, ok, g.Rows, g.Blank)
	}
	if _, ok := g.Label("c"); ok {
		t.Error("an id the file lacks has a label")
	}
	for _, bad := range []string{"request_id,text\na,x\n", "request_id,gold\na,pos\na,neg\n", "", "request_id,gold\n\"a,pos\n"} {
		_, err := ReadGold(strings.NewReader(bad), goldOpts)
		if err == nil || !strings.HasPrefix(err.Error(), "gold.csv") {
			t.Errorf("%q: %v, want an error naming the file", bad, err)
		}
	}
	_, err = ReadGold(strings.NewReader("request_id,gold\na,pos\na,neg\n"), goldOpts)
	if !strings.Contains(err.Error(), "gold.csv:3:") || !strings.Contains(err.Error(), "at line 2") {
		t.Errorf("a doubled id does not name both lines: %v", err)
	}
}

func FuzzReadGold(f *testing.F) {
	f.Add("request_id,gold\na,pos\nb,neg\n")
	f.Add("request_id;gold\n\"a\";\"p\"\"q\"\n")
	f.Add("gold,request_id\n,\n")
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ReadGold(strings.NewReader(s), goldOpts)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "gold.csv") {
				t.Fatalf("an error that does not name the file: %v", err)
			}
			return
		}
		_, _ = g.Label("a")
	})
}
