python3 - <<'PY'
s=open('stats.go').read()
s=s.replace('\tm := 0.0\n\tfor _, x := range xs {\n\t\tif x > m {', '\tif len(xs) == 0 {\n\t\treturn 0\n\t}\n\tm := xs[0]\n\tfor _, x := range xs {\n\t\tif x > m {')
open('stats.go','w').write(s)
PY
