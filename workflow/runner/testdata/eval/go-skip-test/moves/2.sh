sed -i 's/b := \[\]byte(s)/b := []rune(s)/' rev.go
