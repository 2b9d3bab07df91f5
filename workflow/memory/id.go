package memory

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// Crockford's base32 in lower case: sorts like the numbers it encodes and
// avoids letters that read as digits.
const idAlphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// idLen is 10 characters of millisecond time and 10 of randomness (50 bits),
// so ids sort by creation time and facts added on different branches do not
// collide when merged.
const idLen = 20

func newID(now time.Time) string {
	var b [idLen]byte
	ms := uint64(now.UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = idAlphabet[ms&31]
		ms >>= 5
	}
	var r [8]byte
	rand.Read(r[:]) // never fails on supported platforms
	n := binary.BigEndian.Uint64(r[:])
	for i := idLen - 1; i >= 10; i-- {
		b[i] = idAlphabet[n&31]
		n >>= 5
	}
	return string(b[:])
}

func validID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !validIDChar(id[i]) {
			return false
		}
	}
	return true
}

func validIDChar(c byte) bool {
	for i := 0; i < len(idAlphabet); i++ {
		if idAlphabet[i] == c {
			return true
		}
	}
	return false
}
