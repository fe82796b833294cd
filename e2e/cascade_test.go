package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hfsent/hfsent/internal/calibration"
	"github.com/hfsent/hfsent/internal/fakehf"
	"github.com/hfsent/hfsent/internal/queue/pgtest"
	"github.com/hfsent/hfsent/internal/stage"
)

// cascadeFile writes, in dir, a cascade of the embedded model (whose
// calibration believes its NEUTRAL answers 10% of the time: they go on,
// under escalate-below 0.5) and a chat model at chatURL.
func cascadeFile(t *testing.T, dir, chatURL string) string {
	t.Helper()
	cal := filepath.Join(dir, "local.json")
	f, err := (&stage.Config{Provider: "local"}).For()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := calibration.Constant(f, map[string]float64{"NEUTRAL": 0.1, "POSITIVE": 0.95, "NEGATIVE": 0.9}).Write(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cal, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "cascade.yaml")
	body := fmt.Sprintf("stages:\n  - provider: local\n    calibration: %s\n    escalate-below: 0.5\n"+
		"  - provider: chat\n    model: strong\n    endpoint: %s/v1/chat/completions\n    labels: [POSITIVE, NEGATIVE, NEUTRAL]\n", cal, chatURL)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// serve runs a request through the same cascade as classify: a text the
// embedded model answers with confidence is its, at stage 1; a NEUTRAL
// one goes on to the chat model (stage 2), and the answer says so.
func TestCascadeServe(t *testing.T) {
	chat := &fakehf.Chat{}
	srv := fakehf.StartChat(chat)
	defer srv.Close()
	s := startServe(t, "--cascade", cascadeFile(t, t.TempDir(), srv.URL), "--no-cache")
	sure := s.feedback("a", "I love it, the engineer was wonderful!")
	if sure.status != 200 || sure.body["model"] != "local/vader" || sure.body["stage"] != float64(1) {
		t.Fatalf("a confident answer: %d %v", sure.status, sure.body)
	}
	up := s.feedback("b", "The visit is booked for Tuesday.")
	if up.status != 200 || up.body["model"] != "strong" || up.body["stage"] != float64(2) || up.body["label"] != "POSITIVE" || up.body["raw_score"] == nil {
		t.Fatalf("a NEUTRAL answer sent on: %d %v", up.status, up.body)
	}
	b, _ := json.Marshal(map[string]any{"items": []map[string]string{{"request_id": "c", "text": "Horrible, the worst repair ever."}, {"request_id": "d", "text": "The invoice arrived by post."}}})
	resp, err := http.Post("http://"+s.addr+"/v1/classify", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var items struct {
		Results []map[string]any
	}
	if err := json.NewDecoder(resp.Body).Decode(&items); err != nil || len(items.Results) != 2 {
		t.Fatalf("/v1/classify: %v %v", err, items)
	}
	if items.Results[0]["stage"] != float64(1) || items.Results[1]["stage"] != float64(2) || items.Results[1]["attempts"] != float64(2) {
		t.Fatalf("items %v", items.Results)
	}
	if chat.Calls() != 2 {
		t.Fatalf("the chat model got %d calls, want the 2 NEUTRAL texts'", chat.Calls())
	}
}

// A worker takes its claimed rows through the same cascade: the export
// has the stage column, and the rows sent on are the chat model's.
func TestCascadeWorker(t *testing.T) {
	db := pgtest.URL(t)
	chat := &fakehf.Chat{}
	srv := fakehf.StartChat(chat)
	defer srv.Close()
	rows := [][3]string{
		{"a", "I love it, the engineer was wonderful!", "x"},
		{"b", "The visit is booked for Tuesday.", "x"},
		{"c", "Horrible, the worst repair ever.", "x"},
		{"d", "The invoice arrived by post.", "x"},
	}
	pushBatch(t, db, "cascade", rows, "--model", "local/vader")
	w := startWorker(t, db, "--batch", "cascade", "--exit-when-done", "--cascade", cascadeFile(t, t.TempDir(), srv.URL), "--no-cache")
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker exit %d\n%s", code, w.stderr.String())
	}
	if !strings.Contains(w.stderr.String(), "stage1_rows=2 stage1_escalated=2 stage1_calls=4 stage2_rows=2") {
		t.Fatalf("the worker's summary lacks its stages:\n%s", w.stderr.String())
	}
	out := exportRows(t, db, "cascade")
	want := map[string]string{"a": "1", "b": "2", "c": "1", "d": "2"}
	for _, r := range out {
		if r["stage"] != want[r["request_id"]] || r["outcome"] != "success" || (r["stage"] == "2") != (r["model"] == "strong") {
			t.Fatalf("exported row %v", r)
		}
	}
	if len(out) != 4 || chat.Calls() != 2 {
		t.Fatalf("%d rows, %d chat calls", len(out), chat.Calls())
	}
}
