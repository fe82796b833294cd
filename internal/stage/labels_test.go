package stage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Everything in a label file changes what a calibration is for (its
// request hash): a description changed is another run.
func TestLabelFileChangesTheCalibrationHash(t *testing.T) {
	dir := t.TempDir()
	file := func(name, desc string) string {
		p := filepath.Join(dir, name)
		body := "labels:\n  - name: positive\n    description: " + desc + "\n  - name: negative\n"
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hash := func(kind, endpoint, labelsFile string) string {
		c := &Config{Provider: kind, Model: "m", Endpoint: endpoint, LabelsFile: labelsFile, ExamplesPerLabel: 3, Constrain: "auto",
			Given: func(n string) bool { return n == "model" }}
		if err := c.ValidateRequest(); err != nil {
			t.Fatal(err)
		}
		f, err := c.For()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(f.Labels, ",") != "positive,negative" {
			t.Fatalf("labels %v", f.Labels)
		}
		return f.Request
	}
	for _, k := range []struct{ kind, endpoint string }{{"chat", "http://h/v1/chat/completions"}, {"hf", "http://h/models/{model}"}} {
		a := hash(k.kind, k.endpoint, file("a.yaml", "glad of it"))
		b := hash(k.kind, k.endpoint, file("b.yaml", "glad of it, even mildly"))
		if a == "" || a == b {
			t.Errorf("%s: the hash does not see the description: %s %s", k.kind, a, b)
		}
		if again := hash(k.kind, k.endpoint, file("c.yaml", "glad of it")); again != a {
			t.Errorf("%s: the same set, another hash", k.kind)
		}
	}
}
