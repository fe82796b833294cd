package cache

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// formatV1 is the schema hfsent wrote before format 2 (entry as a b-tree
// by the whole key), as such files hold it.
const formatV1 = `
create table entry (key blob primary key, seq integer not null, at integer not null, val blob not null, sum blob not null) without rowid;
create index entry_seq on entry (seq);
create table totals (id integer primary key check (id = 1), hits integer not null, saved_prompt integer not null,
	saved_completion integer not null, saved_usd real not null, costed integer not null);
insert into totals values (1, 7, 0, 0, 0, 0);
pragma application_id = 1751544675;
pragma user_version = 1;
`

// TestUpgradesFormat1: a cache written by an earlier hfsent is opened,
// kept whole (entries, their order, the totals) and read as before.
func TestUpgradesFormat1(t *testing.T) {
	dir := t.TempDir()
	db, err := sql.Open("sqlite", filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(formatV1); err != nil {
		t.Fatal(err)
	}
	// Stored newest first by key number: seq 3 is key(0), the newest.
	for i, seq := range []int{3, 2, 1} {
		s := seal(Record{Key: key(i), Entry: entry(i)})
		if _, err := db.Exec("insert into entry values (?, ?, ?, ?, ?)", s.Key[:], seq, s.AtMs, s.Val, s.Sum); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	c := open(t, dir, 0)
	hits := c.Lookup(context.Background(), []Key{key(0), key(1), key(2), key(3)})
	for i, h := range hits[:3] {
		if !h.Found || h.Entry.Label != entry(i).Label {
			t.Errorf("key %d after the upgrade: %+v", i, h)
		}
	}
	if hits[3].Found {
		t.Error("a key never stored was found")
	}
	st, err := c.Store().Stats(context.Background())
	if err != nil || st.Entries != 3 || st.Hits != 7 {
		t.Errorf("stats %+v, %v: want 3 entries and the file's 7 hits", st, err)
	}
	closeCache(t, c)

	db, _ = sql.Open("sqlite", filepath.Join(dir, FileName))
	defer db.Close()
	var ver int
	if err := db.QueryRow("pragma user_version").Scan(&ver); err != nil || ver != fileFormat {
		t.Fatalf("format %d, %v", ver, err)
	}
	rows, err := db.Query("select key from entry order by seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var order []Key
	for rows.Next() {
		var k []byte
		rows.Scan(&k)
		order = append(order, Key(k))
	}
	if len(order) != 3 || order[0] != key(2) || order[2] != key(0) {
		t.Errorf("the oldest-first order was not kept")
	}
}

// TestPutAgainReplaces: a key stored again holds the newer answer, once,
// and is the newest entry (the last the size bound removes).
func TestPutAgainReplaces(t *testing.T) {
	dir := t.TempDir()
	c := open(t, dir, 0)
	c.Put(key(1), Entry{Label: "positive", Score: 0.9, Model: "m"})
	c.Put(key(2), entry(2))
	closeCache(t, c)
	c = open(t, dir, 0)
	c.Put(key(1), Entry{Label: "negative", Score: 0.8, Model: "m"})
	closeCache(t, c)

	c = open(t, dir, 0)
	defer closeCache(t, c)
	if st := c.Stats(); st.Off {
		t.Fatal("the store was switched off")
	}
	h := c.Lookup(context.Background(), []Key{key(1)})[0]
	if !h.Found || h.Entry.Label != "negative" {
		t.Fatalf("key 1: %+v, want the newer answer", h)
	}
	f := c.Store().(*File)
	var n, newest int
	k1 := key(1)
	if err := f.db.QueryRow("select count(*), (select seq from entry where key = ?) = max(seq) from entry", k1[:]).Scan(&n, &newest); err != nil {
		t.Fatal(err)
	}
	if n != 2 || newest != 1 {
		t.Errorf("%d entries, key 1 newest %v: want 2 entries and key 1 the newest", n, newest == 1)
	}
}

// TestKeysSharingAPrefixNeverAnswerEachOther: two keys whose first 8
// bytes (the index's) agree share one slot: the newer replaces the older,
// which is then a miss, never the other's answer, nor counted as damage.
func TestKeysSharingAPrefixNeverAnswerEachOther(t *testing.T) {
	dir := t.TempDir()
	a := key(1)
	b := a
	b[31] ^= 1
	c := open(t, dir, 0)
	c.Put(a, Entry{Label: "positive", Score: 0.9, Model: "m"})
	c.Put(b, Entry{Label: "negative", Score: 0.8, Model: "m"})
	closeCache(t, c)
	c = open(t, dir, 0)
	defer closeCache(t, c)
	hits := c.Lookup(context.Background(), []Key{a, b})
	if hits[0].Found {
		t.Errorf("key a answered with %q", hits[0].Entry.Label)
	}
	if !hits[1].Found || hits[1].Entry.Label != "negative" {
		t.Errorf("key b: %+v", hits[1])
	}
	if st := c.Stats(); st.Damaged != 0 || st.Off {
		t.Errorf("stats %+v: a twin is not damage", st)
	}
}

// TestLookupsUseTheKeyIndex: a lookup, a put and a deletion by key find
// the entry through entry_key8, never by reading the whole table (the
// query must name the indexed expression exactly as the index does).
func TestLookupsUseTheKeyIndex(t *testing.T) {
	f, err := OpenFile(context.Background(), t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	k := key(1)
	for _, q := range []string{
		"select key, at, val, sum from entry where " + key8 + " in (?, ?)",
		"delete from entry where " + key8 + " = ? and key = ?",
	} {
		rows, err := f.db.Query("explain query plan "+q, k[:8], k[:])
		if err != nil {
			t.Fatal(err)
		}
		var plan string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			rows.Scan(&id, &parent, &unused, &detail)
			plan += detail + "; "
		}
		rows.Close()
		if !strings.Contains(plan, "USING INDEX entry_key8") || strings.Contains(plan, "SCAN entry") {
			t.Errorf("%s: plan %q, want a search of entry_key8", q, plan)
		}
	}
}
