sed -i 's|float64(len(xs)+1)|float64(len(xs))|' stats.go
