package fakehf

import (
	"fmt"
	"strings"
	"testing"
)

func TestGoldAnswersRightAtItsRateWithInformativeScores(t *testing.T) {
	var b strings.Builder
	b.WriteString("request_id,text,gold\n")
	for i := 0; i < 4000; i++ {
		fmt.Fprintf(&b, "r%d,text number %d,%s\n", i, i, []string{"positive", "negative"}[i%2])
	}
	g, err := ReadGold(strings.NewReader(b.String()), "text", "gold", 0.93)
	if err != nil {
		t.Fatal(err)
	}
	var right int
	var pRight, pWrong float64
	for i := 0; i < 4000; i++ {
		text := fmt.Sprintf("text number %d", i)
		l, p, ok := g.Answer(text)
		if l2, p2, _ := g.Answer(text); !ok || l2 != l || p2 != p {
			t.Fatalf("%q: not answered alike twice", text)
		}
		if l == []string{"positive", "negative"}[i%2] {
			right++
			pRight += p
		} else {
			pWrong += p
		}
	}
	if share := float64(right) / 4000; share < 0.91 || share > 0.95 {
		t.Fatalf("right %.3f of the time, want about 0.93", share)
	}
	if pRight/float64(right) <= pWrong/float64(4000-right)+0.1 {
		t.Fatalf("mean probability right %.3f, wrong %.3f: no information", pRight/float64(right), pWrong/float64(4000-right))
	}
	if _, _, ok := g.Answer("not in the file"); ok {
		t.Fatal("a text not in the file answered from it")
	}
	if _, err := ReadGold(strings.NewReader("a,b\n"), "text", "gold", 0.9); err == nil {
		t.Fatal("a file without the columns read")
	}
}
