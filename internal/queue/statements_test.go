package queue

import (
	"context"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// sqlNames lists the files of sql/, by name.
func sqlNames(t *testing.T) []string {
	t.Helper()
	files, err := fs.Glob(sqlFiles, "sql/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no statements: %v", err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(strings.TrimPrefix(f, "sql/"), ".sql"))
	}
	return names
}

// Every file of sql/ is a statement the package loads, numbered as pgx
// numbers named arguments: binding by name gives pgx.NamedArgs' text and
// order.
func TestStatementsAreLoadedAndNumberedAsPgxDoes(t *testing.T) {
	src, err := os.ReadFile("statements.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range sqlNames(t) {
		if !strings.Contains(string(src), `load("`+name+`")`) {
			t.Errorf("sql/%s.sql is not loaded in statements.go", name)
			continue
		}
		s := load(name)
		text, _ := sqlFiles.ReadFile("sql/" + name + ".sql")
		named := pgx.NamedArgs{}
		for i, p := range s.params {
			named[p] = i
		}
		wantSQL, wantArgs, err := named.RewriteQuery(context.Background(), nil, string(text), nil)
		if err != nil {
			t.Fatal(err)
		}
		args := pgx.StrictNamedArgs{}
		for i, p := range s.params {
			args[p] = i
		}
		gotSQL, gotArgs, err := s.with(args).RewriteQuery(context.Background(), nil, "", nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if gotSQL != wantSQL || !reflect.DeepEqual(gotArgs, wantArgs) {
			t.Errorf("%s: bound as %v, pgx.NamedArgs gives %v", name, gotArgs, wantArgs)
		}
	}
}

// A parameter not given, or one given that the statement does not have,
// fails the statement, naming it.
func TestStatementArgumentsAreStrict(t *testing.T) {
	for _, c := range []struct {
		args pgx.StrictNamedArgs
		want string
	}{
		{pgx.StrictNamedArgs{"seqs": []int64{1}, "owner": "w"}, "sql/release.sql: no value for @batch"},
		{pgx.StrictNamedArgs{"batch": 1, "seqs": []int64{1}, "owner": "w", "lease": 3}, "sql/release.sql has no @lease"},
	} {
		_, _, err := sqlRelease.with(c.args).RewriteQuery(context.Background(), nil, "", nil)
		if err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	if _, args, err := sqlRelease.with(pgx.StrictNamedArgs{"batch": 7, "seqs": []int64{1}, "owner": "w"}).RewriteQuery(context.Background(), nil, "", nil); err != nil ||
		!reflect.DeepEqual(args, []any{7, []int64{1}, "w"}) {
		t.Errorf("bound %v, %v; want batch, seqs, owner in their order", args, err)
	}
}

// A clause shared by statements is written whole in each, between
// "-- shared: NAME (files)" and "-- end shared": every copy is the same,
// and it is in the files named, no other.
func TestSharedClausesAreTheSameInEachStatement(t *testing.T) {
	start := regexp.MustCompile(`^-- shared: (\w+) \(([\w, ]+)`)
	type copyOf struct {
		file, text string
		files      []string
	}
	copies := map[string][]copyOf{}
	for _, name := range sqlNames(t) {
		text, _ := sqlFiles.ReadFile("sql/" + name + ".sql")
		lines := strings.Split(string(text), "\n")
		for i := 0; i < len(lines); i++ {
			m := start.FindStringSubmatch(lines[i])
			if m == nil {
				if strings.HasPrefix(lines[i], "-- shared") || strings.HasPrefix(lines[i], "-- end shared") {
					t.Errorf("%s: stray %q", name, lines[i])
				}
				continue
			}
			var body []string
			for i++; i < len(lines) && lines[i] != "-- end shared"; i++ {
				body = append(body, strings.TrimSpace(lines[i]))
			}
			if i == len(lines) {
				t.Fatalf("%s: shared clause %s not ended", name, m[1])
			}
			files := strings.Split(strings.ReplaceAll(m[2], " ", ""), ",")
			copies[m[1]] = append(copies[m[1]], copyOf{name, strings.Join(body, "\n"), files})
		}
	}
	if len(copies) == 0 {
		t.Fatal("no shared clause found")
	}
	for clause, cs := range copies {
		var in []string
		for _, c := range cs {
			if c.text != cs[0].text {
				t.Errorf("shared clause %s differs between %s and %s:\n%s\n--\n%s", clause, cs[0].file, c.file, cs[0].text, c.text)
			}
			if !slices.Equal(c.files, cs[0].files) {
				t.Errorf("shared clause %s names %v in %s, %v in %s", clause, cs[0].files, cs[0].file, c.files, c.file)
			}
			in = append(in, c.file)
		}
		slices.Sort(in)
		want := slices.Sorted(slices.Values(cs[0].files))
		if !slices.Equal(in, want) {
			t.Errorf("shared clause %s is in %v, its marker names %v", clause, in, want)
		}
	}
}

// Binding once-numbered statements by name against pgx.StrictNamedArgs,
// which lexes the whole text on every send, for the two statements every
// round trip of a busy worker sends (go test -bench NamedArgs
// ./internal/queue).
func BenchmarkNamedArgs(b *testing.B) {
	for _, s := range []*statement{sqlClaimOne, sqlComplete} {
		text, _ := sqlFiles.ReadFile("sql/" + s.name + ".sql")
		args := pgx.StrictNamedArgs{}
		for i, p := range s.params {
			args[p] = i
		}
		b.Run(s.name+"/pgx.StrictNamedArgs", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := args.RewriteQuery(context.Background(), nil, string(text), nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(s.name+"/statement.with", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := s.with(args).RewriteQuery(context.Background(), nil, "", nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
