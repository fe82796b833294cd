package dedupe

import (
	"fmt"
	"testing"
)

func TestLRUIsBounded(t *testing.T) {
	c := New[int](100)
	for i := range 10_000 {
		k := c.Key(fmt.Sprint("text ", i))
		_, st, f := c.Claim(k)
		if st != Lead {
			t.Fatalf("unique text %d: state %v", i, st)
		}
		c.Finish(f, i, true)
	}
	if c.Len() != 100 {
		t.Fatalf("holds %d answers, want 100", c.Len())
	}
	if v, st, _ := c.Claim(c.Key("text 9999")); st != Hit || v != 9999 {
		t.Fatalf("recent text: %v %v", v, st)
	}
	if _, st, f := c.Claim(c.Key("text 0")); st != Lead {
		t.Fatalf("evicted text: %v", st)
	} else {
		c.Finish(f, 0, false)
	}
}

func TestFlight(t *testing.T) {
	c := New[string](10)
	k := c.Key("same")
	_, st, lead := c.Claim(k)
	if st != Lead {
		t.Fatal(st)
	}
	_, st, wait := c.Claim(k)
	if st != Wait || wait != lead {
		t.Fatalf("duplicate in flight: %v", st)
	}
	// A failure is not remembered: the waiter asks for itself, and so does
	// the next duplicate.
	c.Finish(lead, "", false)
	<-wait.Done()
	if _, ok := wait.Result(); ok {
		t.Fatal("failed flight reported ok")
	}
	_, st, lead = c.Claim(k)
	if st != Lead {
		t.Fatalf("after a failure: %v", st)
	}
	c.Finish(lead, "POSITIVE", true)
	if v, st, _ := c.Claim(k); st != Hit || v != "POSITIVE" {
		t.Fatalf("after success: %v %v", v, st)
	}
	if c.Key("same") == c.Key("other") {
		t.Fatal("keys collide")
	}
}
