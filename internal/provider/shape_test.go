package provider

import "testing"

func TestAnswerShape(t *testing.T) {
	for body, want := range map[string]string{
		`[[{"label":"POSITIVE","score":0.99}]]`:                          ShapeNested,
		` [ [ {"label":"a","score":1} ], [ {"label":"b","score":1} ] ] `: ShapeNested,
		`[{"label":"POSITIVE","score":0.99}]`:                            ShapeFlat,
		`[]`:                                                             "",
		`{"error":"x"}`:                                                  "",
		`[1,2]`:                                                          "",
		`not json`:                                                       "",
		``:                                                               "",
	} {
		if got := AnswerShape([]byte(body)); got != want {
			t.Errorf("AnswerShape(%q) = %q, want %q", body, got, want)
		}
	}
}
