// Package pgtest gives each test its own PostgreSQL database on the server
// named by $HFSENT_TEST_DATABASE_URL, and drops it when the test ends.
// Without the variable the test is skipped with a message saying how to run
// it (.ci/run sets it, and fails rather than skip when no PostgreSQL can be
// had).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env is the variable that names the test server: a URL whose database the
// tests may connect to in order to create and drop their own.
const Env = "HFSENT_TEST_DATABASE_URL"

// URL creates a fresh database for t and returns its URL.
func URL(t testing.TB) string {
	t.Helper()
	base := lookup()
	if base == "" {
		t.Skipf("no PostgreSQL for this test: set %s=postgres://postgres@127.0.0.1:5432/postgres (.ci/run sets it up)", Env)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("%s is set but PostgreSQL does not answer: %v", Env, err)
	}
	defer conn.Close(context.Background())
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "hfsent_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "create database "+name); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "drop database if exists "+name+" with (force)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil || u.Scheme == "" {
		t.Fatalf("%s must be a postgres:// URL", Env)
	}
	u.Path = "/" + name
	return u.String()
}

func lookup() string {
	return strings.TrimSpace(getenv(Env))
}

func getenv(k string) string { return os.Getenv(k) }
