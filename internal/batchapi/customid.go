package batchapi

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/hfsent/hfsent/internal/redact"
)

// MaxIndex bounds the row index a custom_id carries: far above any input
// (OpenAI takes 50,000 lines a file), low enough that "r"+index stays short
// and fits an int everywhere.
const MaxIndex = 1<<40 - 1

// CustomID is the custom_id of the row at index (0-based, in the input):
// "r17". It is made from the index, never from the row's own id, so it is
// unique within a run and valid for every provider whatever the ids hold
// (empty, repeated, long, or any characters).
func CustomID(index int) string {
	return "r" + strconv.Itoa(index)
}

// ParseCustomID is the row index of a custom_id CustomID made. It accepts
// exactly what CustomID makes: "r" then a decimal index, with no sign, no
// leading zero (but "r0"), no space, at most MaxIndex. Anything else is an
// error, so that a line can never be assigned to a row by a lenient reading.
func ParseCustomID(s string) (int, error) {
	const maxLen = 1 + 13 // "r" and MaxIndex's 13 digits
	if len(s) < 2 || len(s) > maxLen || s[0] != 'r' {
		return 0, errCustomID(s)
	}
	digits := s[1:]
	if digits[0] == '0' && len(digits) > 1 {
		return 0, errCustomID(s)
	}
	n := 0
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, errCustomID(s)
		}
		n = n*10 + int(c-'0')
	}
	if n > MaxIndex {
		return 0, errCustomID(s)
	}
	return n, nil
}

// ErrCustomID is what ParseCustomID's errors wrap.
var ErrCustomID = errors.New("not a custom_id this client writes")

func errCustomID(s string) error {
	const show = 40
	q := s
	if len(q) > show {
		q = q[:show] + "…"
	}
	return fmt.Errorf("%w (r<index>): %q", ErrCustomID, redact.Text(q))
}
