package stage

import (
	"slices"
	"testing"
	"time"
)

// --service-tier flex gives a call OpenAI's advised 15 minutes when no
// --timeout (nor a file's timeout key) was given; a timeout given wins,
// and another tier keeps the default.
func TestFlexTimeoutUnlessOneIsGiven(t *testing.T) {
	for _, tc := range []struct {
		name, tier string
		given      []string
		want       time.Duration
	}{
		{"flex", "flex", nil, FlexTimeout},
		{"flex with --timeout", "flex", []string{"timeout"}, 30 * time.Second},
		{"default tier", "default", nil, 30 * time.Second},
		{"no tier", "", nil, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			given := append([]string{"model", "labels"}, tc.given...)
			c := validConfig()
			c.Provider, c.Model, c.Labels, c.ServiceTier = "chat", "gpt-5-nano", "positive,negative", tc.tier
			c.Timeout = 30 * time.Second
			c.Given = func(n string) bool { return slices.Contains(given, n) }
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if c.Timeout != tc.want {
				t.Fatalf("timeout %v, want %v", c.Timeout, tc.want)
			}
		})
	}
}
