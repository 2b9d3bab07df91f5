python3 - <<'PY'
import re
s=open('clamp.go').read()
s=s.replace('\treturn v\n}', '\tif v > hi {\n\t\treturn hi\n\t}\n\treturn v\n}')
open('clamp.go','w').write(s)
PY
