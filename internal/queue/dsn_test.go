package queue

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
)

// Every way of writing a password in a --db value that pgx accepts (or
// nearly accepts) is kept out of the messages: URL and key=value forms,
// spaces around "=", quotes, backslash escapes, sslpassword, and values
// that do not parse. What a message shows is the host, port, database and
// user pgx parsed.
func TestOpenErrorsHideThePassword(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		dsn  string
		kind error
		show string // "" when the value does not parse
	}{
		{"postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=2", ErrConnect, "host=127.0.0.1 port=1 dbname=db user=u"},
		{"postgres://u:s3cret@127.0.0.1:1/db?sslpassword=s3cret&connect_timeout=2", ErrConnect, "host=127.0.0.1 port=1 dbname=db user=u"},
		{"postgres://u:s3cret@[::1:bad/db", ErrURL, ""},
		{"postgres://u:s3/cret@127.0.0.1:1/db", ErrURL, ""},
		{"host=127.0.0.1 port=1 password=s3cret connect_timeout=2", ErrConnect, "host=127.0.0.1 port=1"},
		{"host=127.0.0.1 port=1 password = s3cret dbname=x user=u connect_timeout=2", ErrConnect, "host=127.0.0.1 port=1 dbname=x user=u"},
		{"host=127.0.0.1 port=1 password =s3cret connect_timeout=2", ErrConnect, "port=1"},
		{"host=127.0.0.1 port=1 sslpassword=s3cret connect_timeout=2", ErrConnect, "port=1"},
		{"host=127.0.0.1 port=1 password='first s3cret' connect_timeout=2", ErrConnect, "port=1"},
		{"host=127.0.0.1 port=1 password='it''s s3cret' connect_timeout=2", ErrURL, ""},
		{`host=127.0.0.1 port=1 password=first\ s3cret connect_timeout=2`, ErrConnect, "port=1"},
		{`host=127.0.0.1 port=1 password='first \' s3cret' connect_timeout=2`, ErrConnect, "port=1"},
		{"host=127.0.0.1 port=1 password='unterminated s3cret", ErrURL, ""},
		{"host=127.0.0.1 port=1 password=first s3cret dbname=x", ErrURL, ""},
		{"host=127.0.0.1 port=bad password=s3cret", ErrURL, ""},
		{"host=127.0.0.1 port=1 sslmode=bogus password=s3cret", ErrURL, ""},
		{"password=s3cret\x00 host=127.0.0.1", ErrURL, ""},
		{"s3cret", ErrURL, ""},
	} {
		_, err := Open(ctx, tc.dsn)
		switch {
		case err == nil:
			t.Errorf("%q: no error", tc.dsn)
		case strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "cret"):
			t.Errorf("%q: the password is shown: %v", tc.dsn, err)
		case !errors.Is(err, tc.kind):
			t.Errorf("%q: %v, want %v", tc.dsn, err, tc.kind)
		case tc.show != "" && !strings.Contains(err.Error(), tc.show):
			t.Errorf("%q: %v, want it to name %s", tc.dsn, err, tc.show)
		case tc.show == "" && !strings.Contains(err.Error(), "not shown"):
			t.Errorf("%q: %v, want it to say the value is not shown", tc.dsn, err)
		}
	}
}

// describe shows odd values quoted and escaped, so that a database name
// cannot put a control sequence on the operator's terminal.
func TestDescribeEscapes(t *testing.T) {
	_, shown, err := parseDSN("host=db.internal port=6543 dbname='my\x1b[31m db' user='' password=x")
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsRune(shown, 0x1b) || !strings.Contains(shown, `dbname="my\x1b[31m db"`) || !strings.HasPrefix(shown, "host=db.internal port=6543 ") {
		t.Fatalf("shown: %s", shown)
	}
	_, shown, err = parseDSN("postgres://a:b@h1:5432,h2:5433/d")
	if err != nil || shown != "host=h1,h2 port=5432,5433 dbname=d user=a" {
		t.Fatalf("two hosts: %q %v", shown, err)
	}
}

// FuzzDSNHidesThePassword: whatever the password, written in any of the
// forms pgx reads, nothing that parseDSN says (the database it names, or
// why the value does not parse) holds it. Any input at all: no panic.
func FuzzDSNHidesThePassword(f *testing.F) {
	for _, s := range []string{"s3cret", "first s3cret", `a\b'c`, "p@ss/w?rd#x", "x dbname=y", "'", "", "日本語のパスワード"} {
		for form := range uint8(5) {
			f.Add(s, form)
		}
	}
	f.Fuzz(func(t *testing.T, password string, form uint8) {
		_, _, _ = parseDSN(password) // anything: no panic
		if len(password) < 6 || strings.ContainsRune(password, 0) {
			return
		}
		dsn, ok := dsnWith(password, form%5)
		if !ok {
			return
		}
		// A password that is part of what any value shows (a host, "port="):
		// its presence proves nothing.
		plain, _ := dsnWith("x", form%5)
		if _, fixed, err := parseDSN(plain); err != nil || strings.Contains(fixed, password) {
			return
		}
		cfg, shown, err := parseDSN(dsn)
		if err != nil {
			if strings.Contains(err.Error(), password) {
				t.Fatalf("%q: the error shows the password: %v", dsn, err)
			}
			return
		}
		if form%5 != 3 && cfg.ConnConfig.Password != password {
			t.Fatalf("%q: parsed password %q, want %q: the form under test is not what pgx reads", dsn, cfg.ConnConfig.Password, password)
		}
		if strings.Contains(shown, password) {
			t.Fatalf("%q: shown as %q", dsn, shown)
		}
	})
}

// dsnWith writes a --db value with password in one of five forms: a URL,
// key=value quoted, quoted with spaces around "=", an sslpassword, and
// backslash-escaped (ok is false where that form cannot hold it).
func dsnWith(password string, form uint8) (string, bool) {
	quoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(password) + "'"
	base := "host=db.internal port=5432 dbname=hfsent user=u "
	switch form {
	case 0:
		return (&url.URL{Scheme: "postgres", User: url.UserPassword("u", password), Host: "db.internal:5432", Path: "/hfsent"}).String(), true
	case 1:
		return base + "password=" + quoted, true
	case 2:
		return base + "password = " + quoted + " sslmode=disable", true
	case 3:
		return base + "sslpassword=" + quoted, true
	}
	escaped := strings.NewReplacer(`\`, `\\`, " ", `\ `, "\t", "\\\t", "\n", "\\\n", "\r", "\\\r", "\v", "\\\v", "\f", "\\\f", `'`, `\'`).Replace(password)
	if strings.HasPrefix(escaped, "'") {
		return "", false // a leading quote opens a quoted value
	}
	return base + "password=" + escaped + " sslmode=disable", true
}
