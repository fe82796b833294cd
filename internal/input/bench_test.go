package input

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
)

func BenchmarkReader(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString("request_id,text\n")
	const rows = 10000
	for i := range rows {
		fmt.Fprintf(&buf, "id%d,\"a review of moderate length, with a comma, number %d\"\n", i, i)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		rd, err := NewReader(bytes.NewReader(data), Options{IDColumn: "request_id", TextColumn: "text"})
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for {
			_, err := rd.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != rows {
			b.Fatal(n)
		}
	}
	b.ReportMetric(float64(rows*b.N)/b.Elapsed().Seconds(), "rows/s")
}
