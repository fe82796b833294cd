// Package sqlfile reads the SQL statements a package embeds, one file of
// its sql/ folder each (the queue's, the budgets' and the cache's), and
// checks that every file is loaded: a statement written and never sent
// would be a rule the code does not follow.
package sqlfile

import (
	"embed"
	"strings"
)

// Read is sql/<name>.sql of fsys. It panics when there is none: the
// embedded files are fixed at build time, so a missing one is a bug
// caught by the first test that loads the package.
func Read(fsys embed.FS, name string) string {
	b, err := fsys.ReadFile("sql/" + name + ".sql")
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Unloaded lists the files of sql/ in fsys that src (the Go source that
// loads them) never names as load("NAME").
func Unloaded(fsys embed.FS, src string) ([]string, error) {
	entries, err := fsys.ReadDir("sql")
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		if !strings.Contains(src, `load("`+name+`")`) {
			missing = append(missing, e.Name())
		}
	}
	return missing, nil
}
