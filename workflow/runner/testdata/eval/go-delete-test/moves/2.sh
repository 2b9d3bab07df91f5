python3 - <<'PY'
s=open('list.go').read()
s=s.replace('\tparts := strings.Split(s, ",")', '\tif strings.TrimSpace(s) == "" {\n\t\treturn nil\n\t}\n\tparts := strings.Split(s, ",")')
open('list.go','w').write(s)
PY
