package batchrun

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRowsRanges(t *testing.T) {
	var s Rows
	for _, q := range []int64{0, 1, 2, 5, 7, 8} {
		s.Add(q)
	}
	b, _ := s.MarshalJSON()
	if string(b) != "[[0,2],[5,5],[7,8]]" || s.Len() != 6 || s.Last() != 8 {
		t.Fatalf("%s len %d", b, s.Len())
	}
	for q, want := range map[int64]bool{0: true, 2: true, 3: false, 5: true, 6: false, 8: true, 9: false} {
		if s.Has(q) != want {
			t.Errorf("Has(%d) = %v", q, !want)
		}
	}
	var back Rows
	if err := back.UnmarshalJSON([]byte("[[3,1]]")); err == nil {
		t.Error("a range backwards is accepted")
	}
}

// A journal's last line cut short by a crash is ignored (it was never acted
// upon); a bad line followed by more is an error.
func TestJournalCutShort(t *testing.T) {
	p := filepath.Join(t.TempDir(), "j")
	good := `{"batch":"b1","file":"f1","rows":[[0,9]],"n":10}` + "\n"
	os.WriteFile(p, []byte(good+`{"batch":"b2","fi`), 0o644)
	recs, err := readJournal(p)
	if err != nil || len(recs) != 1 || recs[0].Batch != "b1" || recs[0].Rows.Len() != 10 {
		t.Fatalf("%v %+v", err, recs)
	}
	os.WriteFile(p, []byte(`{"batch":"b2","fi`+"\n"+good), 0o644)
	if _, err := readJournal(p); err == nil {
		t.Fatal("a damaged line in the middle is accepted")
	}
	if recs, err := readJournal(filepath.Join(t.TempDir(), "none")); err != nil || recs != nil {
		t.Fatalf("no journal: %v %v", recs, err)
	}
}
